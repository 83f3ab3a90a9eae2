package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"atelier/testrig/wait"
)

// terminalPage is the session page's shown terminal, as a test reads and
// types into it.
type terminalPage struct {
	t   *testing.T
	ctx context.Context
}

// openTerminalPage signs the owner in, opens an edit session of project
// id from its Code page, and a terminal in it.
func openTerminalPage(t *testing.T, ctx context.Context, h *harness, id int64) terminalPage {
	t.Helper()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := do(ctx, signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
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

// flakyNet decides, request by request, what becomes of the page's
// terminal input and terminal streams: they pass, or are held (a
// connection open that moves nothing, never answered), or fail as a reset
// connection does.
type flakyNet struct {
	mu     sync.Mutex
	input  string // "pass", "hold" or "fail"
	stream string
	held   int // requests held so far
}

func (n *flakyNet) set(input, stream string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.input, n.stream = input, stream
}

func (n *flakyNet) heldCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.held
}

// intercept has the browser ask n about every input request before it is
// sent and every stream's answer before the page sees it.
func (n *flakyNet) intercept(t *testing.T, ctx context.Context) {
	t.Helper()
	listen, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	err := chromedp.Listen(listen, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		n.mu.Lock()
		way := n.input
		if strings.Contains(e.Request.URL, "/stream") {
			way = n.stream
		}
		if way == "hold" {
			n.held++
		}
		n.mu.Unlock()
		if way == "hold" {
			return // never answered
		}
		go func() {
			_ = do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				switch {
				case way == "fail":
					_, err = cdp.Call(ctx, tg, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonConnectionReset})
				case e.ResponseStatusCode != 0:
					_, err = cdp.Call(ctx, tg, fetch.ContinueResponse, fetch.ContinueResponseParams{RequestID: e.RequestID})
				default:
					_, err = cdp.Call(ctx, tg, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
				}
				return err
			}))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	enable := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
			{URLPattern: "*/terminals/*/input", RequestStage: fetch.RequestStageRequest},
			{URLPattern: "*/terminals/*/stream*", RequestStage: fetch.RequestStageResponse},
		}})
		return err
	})
	if err := do(ctx, enable); err != nil {
		t.Fatal(err)
	}
}

// Typing through a network that drops, as a person would meet it: a
// stream that stays open and moves nothing is found dead within two
// heartbeats and opened again, with the tab saying so; a keystroke request
// stranded on a dead connection is given up and sent again, while the tab
// says keys are waiting; keys typed while every request fails survive
// a reload (the page asks before it goes), reaching the shell once; and
// keys typed blind are shown before they go, and can be discarded.
func TestBrowserTerminalThroughDrops(t *testing.T) {
	needRoot(t)
	h := newHarness(t, func(c *Config) { c.Terminals.Heartbeat = time.Second })
	_, id := editable(t, h)
	ctx := browser(t)
	net := &flakyNet{input: "pass", stream: "hold"}
	net.intercept(t, ctx)
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
	term := openTerminalPage(t, ctx, h, id)

	// The stream's answers never reach the page: a connection open that
	// moves nothing. Two heartbeats on, the tab says it reconnects.
	began := time.Now()
	term.waitStatus("the tab to say the silent stream reconnects", "reconnecting")
	t.Logf("a silent stream was found dead %v after it opened", time.Since(began).Round(100*time.Millisecond))
	term.typeKeys("echo hole-$((6*7))\r")
	net.set("pass", "pass")
	term.waitScreen("the shell's answer once the stream moves again", "hole-42")
	term.waitStatus("the tab to say it is live again", "live")

	// The next keystroke request is stranded; the page gives up on it and
	// sends the keys again on a fresh connection.
	net.set("hold", "pass")
	held := net.heldCount()
	term.typeKeys("echo stranded-$((6*7))\r")
	wait.For(t, wait.Long, "a keystroke request to be stranded", func() bool { return net.heldCount() > held })
	term.waitStatus("the tab to say keys wait", "keys waiting")
	net.set("pass", "pass")
	term.waitScreen("the stranded keys sent again", "stranded-42")

	// Every keystroke request fails, as with the network gone; the page
	// keeps the keys, asks before a reload, and the page after it sends
	// them once the network is back.
	net.set("fail", "pass")
	term.typeKeys("echo reloaded-$((6*7))\r")
	term.waitStatus("the tab to say keys wait", "keys waiting")
	if err := do(ctx, chromedp.Reload()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	select {
	case kind := <-prompts:
		if kind != cdppage.DialogTypeBeforeunload {
			t.Fatalf("a %s dialog, want the leave-page prompt", kind)
		}
	default:
		t.Fatal("leaving the page with keys not sent did not ask first")
	}
	if err := do(ctx, chromedp.WaitReady(chromedp.CSS(`.terminal-tab.current`))); err != nil {
		t.Fatalf("the terminal after the reload: %v; the page has %s", err, pageState(ctx))
	}
	term.waitStatus("the page after the reload to hold the keys", "keys waiting")
	if strings.Contains(term.screen(), "reloaded-42") {
		t.Fatal("the keys reached the shell while every request failed")
	}
	net.set("pass", "pass")
	term.waitScreen("the keys kept over the reload", "reloaded-42")
	term.waitStatus("nothing left to send", "live")
	if n := strings.Count(term.screen(), "reloaded-42"); n != 1 {
		t.Fatalf("the keys kept over the reload ran %d times; the terminal shows %q", n, term.screen())
	}

	// Keys typed blind are shown, Enter as ⏎, before they go; Discard
	// drops them, and the keys typed after it are the only ones to run.
	net.set("fail", "pass")
	term.typeKeys("echo discarded-$((6*7))\r")
	if err := do(ctx, showsText(`.terminal-blind:not([hidden]) code`, "echo discarded-$((6*7))⏎")); err != nil {
		t.Fatalf("the waiting keys are not shown: %v; the page has %s", err, pageState(ctx))
	}
	if err := do(ctx, chromedp.Click(chromedp.CSS(`.terminal-blind:not([hidden]) button.discard`))); err != nil {
		t.Fatal(err)
	}
	term.waitStatus("the discarded keys no longer waiting", "live")
	net.set("pass", "pass")
	term.typeKeys("echo kept-$((6*7))\r")
	term.waitScreen("the keys typed after the discard", "kept-42")
	if strings.Contains(term.screen(), "discarded") {
		t.Fatalf("discarded keys reached the shell: %q", term.screen())
	}
}
