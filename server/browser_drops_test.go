package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"atelier/terminal"
	"atelier/testrig/flakynet"
	"atelier/testrig/termdrop"
	"atelier/testrig/wait"
)

// terminalPage is the session page's shown terminal, as a test reads and
// types into it.
type terminalPage struct {
	t   *testing.T
	ctx context.Context
}

// openTerminalPage signs the owner in at the server's address base (its
// own, or a proxy's), opens an edit session of project id from its Code
// page, and a terminal in it.
func openTerminalPage(t *testing.T, ctx context.Context, base string, id int64) terminalPage {
	t.Helper()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := do(ctx, signInAt(base, "owner", "password-owner"),
		chromedp.Navigate(base+"/projects/"+itoa(id)+"/code"),
		chromedp.Click(css(`button#edit`)),
		chromedp.WaitReady(css(`#terminals[data-started]`)),
		chromedp.Click(css(`#new-terminal`)),
	); err != nil {
		t.Fatalf("opening a terminal: %v; the page has %s", err, pageState(ctx))
	}
	return terminalPage{t: t, ctx: ctx}
}

// shownRows is the shown terminal's screen, lines as xterm draws them.
const shownRows = `(document.querySelector(".terminal-pane:not([hidden])")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "")`

// screen is the terminal's screen with its lines joined, so a line that
// wraps still reads whole.
func (p terminalPage) screen() string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](shownRows))
	if err != nil {
		p.t.Fatal(err)
	}
	return strings.ReplaceAll(s, "\n", "")
}

// waitScreen waits for text on the terminal's screen.
func (p terminalPage) waitScreen(what, text string) {
	p.t.Helper()
	wait.ForNil(p.t, wait.Long, what, func() error {
		if s := p.screen(); !strings.Contains(s, text) {
			return fmt.Errorf("the terminal shows %q", s)
		}
		return nil
	})
}

// typeKeys types text one key at a time, every key in the same task, as
// xterm hears keys from its text area: as fast as anyone can type.
func (p terminalPage) typeKeys(text string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => {
		const area = document.querySelector(".terminal-pane:not([hidden])").shadowRoot.querySelector(".xterm-helper-textarea");
		area.focus();
		for (const key of %q) area.dispatchEvent(new InputEvent("input", {data: key, inputType: "insertText", bubbles: true}));
		return true;
	})()`, text)
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](js)); err != nil {
		p.t.Fatal(err)
	}
}

// status is what the shown terminal's tab says of its connection.
func (p terminalPage) status() string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](
		`(document.querySelector(".terminal-tab.current .terminal-status")?.textContent ?? "")`))
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// waitStatus waits until the tab's status holds text.
func (p terminalPage) waitStatus(what, text string) {
	p.t.Helper()
	wait.ForNil(p.t, wait.Long, what, func() error {
		if s := p.status(); !strings.Contains(s, text) {
			return fmt.Errorf("the status says %q", s)
		}
		return nil
	})
}

// waitLive waits until the tab says live and nothing more: connected, with
// no keys waiting.
func (p terminalPage) waitLive(what string) {
	p.t.Helper()
	wait.ForNil(p.t, wait.Long, what, func() error {
		if s := p.status(); s != "live" {
			return fmt.Errorf("the status says %q", s)
		}
		return nil
	})
}

// Typing through the network's drops, as a person would meet them, through
// a proxy between the browser and the server: every connection reset, and
// a partition (connections open, nothing moves, until it heals). The
// typist types on through each drop; the tab says reconnecting within two
// heartbeats (a second each here, so that the test need not wait out the
// shipped 15 s) and that keys wait, every key reaches the shell once and
// in order, and the terminal catches up once the network returns.
func TestBrowserTerminalThroughDrops(t *testing.T) {
	typeThroughDrops(t, func(c *terminal.Config) { c.Heartbeat = time.Second }, flakynet.Reset, flakynet.Hole)
}

// Connections stranded for good (their route gone without a word: a NAT
// forgot them, the laptop changed networks), with the shipped heartbeat:
// the stream's silence would take two heartbeats (30 s) to tell, and every
// idle connection the browser keeps for the server is as dead as the
// stream's. The keys' first unanswered request finds them all at once,
// and the terminal catches up within 10 s of the strand.
func TestBrowserTerminalThroughAStrand(t *testing.T) {
	typeThroughDrops(t, func(*terminal.Config) {}, flakynet.Strand)
}

// typeThroughDrops types into a terminal page, through each drop in turn,
// on a server whose terminals are configured by terms.
func typeThroughDrops(t *testing.T, terms func(*terminal.Config), drops ...flakynet.Mode) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { terms(&c.Terminals) })
	heartbeat := h.app.Terminals.Config().Heartbeat
	_, id := editable(t, h)
	flaky := listenFlaky(t, h)
	ctx := browser(t)
	page, err := termdrop.Prepare(ctx, termdrop.Atelier)
	if err != nil {
		t.Fatal(err)
	}
	term := openTerminalPage(t, ctx, flaky.URL(), id)
	term.waitLive("the terminal to start")
	ty := termdrop.NewTypist(page)

	// The page's own bound: two heartbeats and a second of silence, seen
	// by a watch that looks once a second; and some slack for a busy
	// machine.
	noticeWithin := 2*heartbeat + 2*time.Second + 2*time.Second
	type seen struct {
		termdrop.Figures
		noticed time.Time // when the tab first said reconnecting
	}
	var figures []seen
	for _, mode := range drops {
		// The drop lasts until the tab has said so, if that takes longer
		// than the typing.
		var noticed time.Time
		hold := func(dropped time.Time) error {
			var err error
			if !wait.Until(wait.Span(noticeWithin-time.Since(dropped)), func() bool {
				noticed, err = page.Said("reconnecting", dropped)
				return err != nil || !noticed.IsZero()
			}) {
				return fmt.Errorf("the tab did not say reconnecting within %v of the drop; it says %q", noticeWithin, term.status())
			}
			return err
		}
		f, err := ty.Through(flaky, termdrop.Drop{Mode: mode, Hold: hold, Recover: wait.Long})
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if waiting, err := page.Said("keys waiting", f.Dropped); err != nil || waiting.IsZero() {
			t.Errorf("%v: the tab never said keys were waiting while the network was gone (%v)", mode, err)
		}
		if f.Shown.IsZero() {
			t.Fatalf("%v: the last line's output did not show within %v of the network's return; the lines that ran: %v; the screen:\n%s",
				mode, wait.Long.Duration(), f.Ran, term.screen())
		}
		term.waitLive(fmt.Sprintf("%v: every key sent", mode))
		figures = append(figures, seen{f, noticed})
		if !slices.Equal(f.Ran, f.Lines) {
			t.Errorf("%v: the lines that ran, in order: %v; want each of %v once; the screen:\n%s",
				mode, f.Ran, f.Lines, term.screen())
		}
		if f.Shell != f.ShellBefore {
			t.Errorf("%v: the shell was %d before the drop and %d after", mode, f.ShellBefore, f.Shell)
		}
		// New connections pass all through a strand: the network is back
		// the moment the old connections go, and so the bound counts from
		// then.
		if caughtUp := f.Shown.Sub(f.Dropped); mode == flakynet.Strand && caughtUp > 10*time.Second {
			t.Errorf("stranded connections: the terminal caught up %v after they were stranded, want within 10 s", caughtUp)
		}
	}
	// In the README's words (Terminals).
	for _, f := range figures {
		t.Logf("%-6v: %d keys typed, %d delivered; reconnecting shown %.1f s into the drop; network back after %.1f s; last output %.1f s after that (%.1f s after the drop began)",
			f.Mode, f.Typed, f.Delivered(), f.noticed.Sub(f.Dropped).Seconds(), f.Returned.Sub(f.Dropped).Seconds(),
			f.Shown.Sub(f.Returned).Seconds(), f.Shown.Sub(f.Dropped).Seconds())
	}
}

// listenFlaky starts a flaky network in front of the harness's server,
// passing until told otherwise.
func listenFlaky(t *testing.T, h *harness) *flakynet.Proxy {
	t.Helper()
	p, err := flakynet.Listen(strings.TrimPrefix(h.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Keys typed with the network gone (every connection reset) survive a
// reload: the page asks before it goes, and the page after it, once the
// network returns, sends them; they run once. Keys typed blind are shown,
// Enter as ⏎, before they go, and Discard drops them.
func TestBrowserTerminalOfflineReloadAndDiscard(t *testing.T) {
	needRoot(t)
	browserTerminalOfflineReloadAndDiscard(t, newHarness(t, heartbeatEverySecond))
}

func TestBrowserTerminalOfflineReloadAndDiscardInAPod(t *testing.T) {
	needRoot(t)
	browserTerminalOfflineReloadAndDiscard(t, newHarness(t, onKube(t), heartbeatEverySecond))
}

func heartbeatEverySecond(c *Config) { c.Terminals.Heartbeat = time.Second }

func browserTerminalOfflineReloadAndDiscard(t *testing.T, h *harness) {
	_, id := editable(t, h)
	flaky := listenFlaky(t, h)
	ctx := browser(t)
	// The leave-page prompt, answered "leave" when it comes.
	prompts := make(chan cdppage.DialogType, 4)
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			prompts <- e.Type
			go func() {
				_ = do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: true})
					return err
				}))
			}()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	term := openTerminalPage(t, ctx, flaky.URL(), id)
	term.waitLive("the terminal to start")
	address, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}

	flaky.Set(flakynet.Reset)
	term.typeKeys("echo reloaded-$((6*7))\r")
	term.waitStatus("the tab to say keys wait", "keys waiting")
	// Reloaded with the network still gone: the page asks first, and the
	// reload fails as any page would.
	reload := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdppage.Reload, cdppage.ReloadParams{})
		return err
	})
	if err := do(ctx, reload); err != nil {
		t.Fatalf("reload: %v", err)
	}
	select {
	case kind := <-prompts:
		if kind != cdppage.DialogTypeBeforeunload {
			t.Fatalf("a %s dialog, want the leave-page prompt", kind)
		}
	case <-time.After(wait.Short.Duration()):
		t.Fatal("leaving the page with keys not sent did not ask first")
	}
	if err := do(ctx, untilPage(`!document.getElementById("terminals")`)); err != nil {
		t.Fatalf("the reload with the network gone: %v; the page has %s", err, pageState(ctx))
	}
	flaky.Set(flakynet.Pass)
	if err := do(ctx, chromedp.Navigate(address), chromedp.WaitReady(chromedp.CSS(`.terminal-tab.current`))); err != nil {
		t.Fatalf("the terminal once the network is back: %v; the page has %s", err, pageState(ctx))
	}
	term.waitScreen("the keys kept over the reload", "reloaded-42")
	term.waitLive("nothing left to send")
	if n := strings.Count(term.screen(), "reloaded-42"); n != 1 {
		t.Fatalf("the keys kept over the reload ran %d times; the terminal shows %q", n, term.screen())
	}

	// Keys typed blind are shown before they go; Discard drops them, and
	// the keys typed after it are the only ones to run.
	flaky.Set(flakynet.Reset)
	term.typeKeys("echo discarded-$((6*7))\r")
	if err := do(ctx, showsText(`.terminal-blind:not([hidden]) code`, "echo discarded-$((6*7))⏎")); err != nil {
		t.Fatalf("the waiting keys are not shown: %v; the page has %s", err, pageState(ctx))
	}
	// Clicked through the element: while the network is gone, lines about
	// it come and go above the terminal, and a mouse click aimed from a
	// moment earlier's layout can land beside the button.
	if err := do(ctx, untilPage(`(() => { const b = document.querySelector(".terminal-blind:not([hidden]) button.discard"); if (b) b.click(); return !!b })()`)); err != nil {
		t.Fatalf("the Discard button: %v; the page has %s", err, pageState(ctx))
	}
	wait.ForNil(t, wait.Long, "the discarded keys no longer waiting", func() error {
		if s := term.status(); strings.Contains(s, "waiting") {
			return fmt.Errorf("the status says %q", s)
		}
		return nil
	})
	flaky.Set(flakynet.Pass)
	term.waitLive("the terminal back")
	term.typeKeys("echo kept-$((6*7))\r")
	term.waitScreen("the keys typed after the discard", "kept-42")
	if strings.Contains(term.screen(), "discarded") {
		t.Fatalf("discarded keys reached the shell: %q", term.screen())
	}
}
