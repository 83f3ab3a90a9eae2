package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"atelier/testrig/chromium"
	"atelier/testrig/flakynet"
	"atelier/testrig/liveserver"
	"atelier/testrig/termdrop"
	"atelier/testrig/wait"
)

// The drop measure (-drops): what a person typing into a terminal meets
// when the network drops under it, on Atelier and on ttyd, each shown in
// headless Chromium through a loopback proxy of its own (testrig/flakynet)
// and typed into the same way (testrig/termdrop, as Atelier's drop test
// types): `echo $((1000+n))` lines at 30 keys/s, a second before the drop
// and 3 s into it. Both run as they ship: Atelier's stream beats every
// 15 s, ttyd pings every 5 s.

// A networkDrop is one way the network fails, for at least length: the
// network returns when the typing into it is over and length has passed
// since it went. A strand has no end: the connections open when it comes
// never move again, and new ones pass from the start.
type networkDrop struct {
	mode   flakynet.Mode
	length time.Duration
}

// networkDrops are the drops measured: resets and partitions of 3 and 15 s
// (a short one a person waits out, and one long enough for a server's
// pings to give up), and a strand.
var networkDrops = []networkDrop{
	{flakynet.Reset, 3 * time.Second},
	{flakynet.Reset, 15 * time.Second},
	{flakynet.Hole, 3 * time.Second},
	{flakynet.Hole, 15 * time.Second},
	{flakynet.Strand, 0},
}

// dropRecover bounds the wait for the last line's output once the network
// is back: longer than Atelier's page takes to find a stranded stream dead
// (two heartbeats and a second).
const dropRecover = 60 * time.Second

// dropTerminal is one product's terminal page in its own tab, behind its
// own proxy.
type dropTerminal struct {
	name  string
	page  *termdrop.Page
	ty    *termdrop.Typist
	net   *flakynet.Proxy
	open  func() error // loads the page afresh, until its terminal is there
	close func()
}

// runDrops measures each of drops on Atelier and on ttyd, taking turns,
// and renders the table.
func runDrops(drops []networkDrop, ttydSrc string, logw io.Writer) (string, error) {
	b, err := newBench(sizes{}, ttydSrc, logw)
	if err != nil {
		return "", err
	}
	defer b.close()
	profile := filepath.Join(b.tmp, "chromium")
	if err := os.Mkdir(profile, 0o700); err != nil {
		return "", err
	}
	browser, stopBrowser, err := chromium.Start(profile)
	if err != nil {
		return "", err
	}
	defer stopBrowser()

	at, err := b.atelierDropTerminal(browser)
	if err != nil {
		return "", err
	}
	defer at.close()
	terminals := []*dropTerminal{at}
	tt, whyNot := b.ttydDropTerminal(browser)
	if tt != nil {
		defer tt.close()
		terminals = append(terminals, tt)
	} else if whyNot == "" {
		return "", errors.New("bench: ttyd neither opened nor said why not")
	}

	var out strings.Builder
	out.WriteString("| drop | terminal | keys typed / delivered | lines run once / twice or more / never | the page said (s into the drop) | the shell after | outputs still on the screen | last output |\n|---|---|---|---|---|---|---|---|\n")
	for _, d := range drops {
		for _, term := range terminals {
			b.logf("drops: %v for %v on %s", d.mode, d.length, term.name)
			if err := term.open(); err != nil {
				return out.String(), err
			}
			hold := func(dropped time.Time) error {
				time.Sleep(time.Until(dropped.Add(d.length)))
				return nil
			}
			f, err := term.ty.Through(term.net, termdrop.Drop{Mode: d.mode, Hold: hold, Recover: wait.Span(dropRecover)})
			if err != nil {
				return out.String(), fmt.Errorf("bench: %s, %v: %w", term.name, d.mode, err)
			}
			out.WriteString(dropRow(f, term.name).String())
		}
		if tt == nil {
			out.WriteString(dropCells{dropName(termdrop.Figures{Mode: d.mode}), "ttyd", "not measured (" + whyNot + ")", "–", "–", "–", "–", "–"}.String())
		}
	}
	return out.String(), nil
}

// dropName is a drop's row heading, in the README's words.
func dropName(f termdrop.Figures) string {
	lasted := ""
	if !f.Returned.IsZero() {
		lasted = fmt.Sprintf(" for %.1f s", f.Returned.Sub(f.Dropped).Seconds())
	}
	switch f.Mode {
	case flakynet.Reset:
		return "every connection reset, and each new one," + lasted
	case flakynet.Hole:
		return "a partition (connections open, nothing moves)" + lasted
	case flakynet.Strand:
		return "every open connection stranded (never moves again, never closes; new ones pass)"
	}
	return f.Mode.String()
}

// dropRow is one drop's figures on one terminal, as a row of the table.
func dropRow(f termdrop.Figures, name string) dropCells {
	once, twice, never := f.Tally()
	said := saidDuring(f)
	if f.LastSign != "" {
		said += fmt.Sprintf("; at the end “%s”", f.LastSign)
	}
	shell := "no answer"
	switch {
	case f.Shell == f.ShellBefore:
		shell = "the same"
	case f.Shell != 0:
		shell = "a new one"
	}
	if f.Shell != 0 && f.Asked > 1 {
		shell += " (answered when asked again)"
	}
	ran := map[int]bool{}
	for _, n := range f.Ran {
		ran[n] = true
	}
	// A strand has no return: the connections it took never come back,
	// and so it counts from the strand.
	from, since := f.Returned, "the network's return"
	if f.Mode == flakynet.Strand {
		from, since = f.Dropped, "the strand"
	}
	last := fmt.Sprintf("never (not within %.0f s of the network's return)", dropRecover.Seconds())
	if !f.Shown.IsZero() {
		last = fmt.Sprintf("%.1f s after %s", f.Shown.Sub(from).Seconds(), since)
	}
	return dropCells{dropName(f), name,
		fmt.Sprintf("%d / %d", f.Typed, f.Delivered()),
		fmt.Sprintf("%d / %d / %d", once, twice, never),
		said, shell,
		fmt.Sprintf("%d of %d", len(f.OnScreen), len(ran)),
		last}
}

// saidDuring is what the page said of its connection from the drop on:
// each state it gave, first shown when. A state is what the page says
// before any " · " (Atelier's tab: "live · 12 keys waiting" is live, with
// keys waiting), so the count of keys going up is not a new state.
func saidDuring(f termdrop.Figures) string {
	var said []string
	seen := map[string]bool{}
	for _, s := range f.Signs {
		state, _, _ := strings.Cut(s.Text, " · ")
		if s.Text == "" || seen[state] {
			continue
		}
		seen[state] = true
		said = append(said, fmt.Sprintf("“%s” at %.1f s", s.Text, s.At.Sub(f.Dropped).Seconds()))
	}
	if len(said) == 0 {
		return "nothing"
	}
	return strings.Join(said, ", ")
}

// dropCells are a row of the drop table.
type dropCells []string

func (c dropCells) String() string {
	for i, s := range c {
		c[i] = strings.ReplaceAll(s, "|", "/")
	}
	return "| " + strings.Join(c, " | ") + " |\n"
}

// newTab opens a tab of the browser, tall enough that a drop's lines all
// stay on the screen (at most 8, an echo and an output row each, and a
// prompt).
func newTab(browser context.Context) (context.Context, context.CancelFunc, error) {
	tab, cancel := chromedp.NewContext(browser)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1280, 1800)); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("bench: open a tab: %w", err)
	}
	return tab, cancel, nil
}

// loadWithin bounds loading a page and finding its terminal.
const loadWithin = wait.Long

// atelierDropTerminal signs the admin in through a proxy to the server,
// opens an edit session and a terminal in it.
func (b *bench) atelierDropTerminal(browser context.Context) (*dropTerminal, error) {
	session, err := b.session("bench-drops", nil)
	if err != nil {
		return nil, err
	}
	proxy, err := flakynet.Listen(b.srv.Addr)
	if err != nil {
		return nil, err
	}
	tab, cancel, err := newTab(browser)
	if err != nil {
		proxy.Close()
		return nil, err
	}
	t := &dropTerminal{name: "Atelier", net: proxy, close: func() { cancel(); proxy.Close() }}
	if t.page, err = termdrop.Prepare(tab, termdrop.Atelier); err != nil {
		t.close()
		return nil, err
	}
	t.ty = termdrop.NewTypist(t.page)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	// Live: the terminal made (a load before that would lose it) and its
	// stream open.
	isLive := chromedp.Poll[bool](`document.querySelector(".terminal-tab.current .terminal-status")?.textContent === "live"`)
	live := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := isLive(ctx, tg)
		return err
	})
	ctx, cancelLoad := context.WithTimeout(tab, loadWithin.Duration())
	defer cancelLoad()
	err = chromedp.Do(ctx,
		chromedp.Navigate(proxy.URL()+"/login"),
		chromedp.SetValue(css(`input[name=username]`), "admin"),
		chromedp.SetValue(css(`input[name=password]`), liveserver.AdminPassword),
		chromedp.Submit(css(`form.stack`)),
		chromedp.WaitVisible(css(`a.button[href="/projects/new"]`)),
		chromedp.Navigate(proxy.URL()+session),
		chromedp.WaitReady(css(`#terminals[data-started]`)),
		chromedp.Click(css(`#new-terminal`)),
		live,
	)
	if err == nil {
		err = t.page.Ready(loadWithin)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("bench: open Atelier's terminal in a browser: %w", err)
	}
	// The page loaded again shows the same terminal, its stream replayed.
	t.open = func() error {
		ctx, cancel := context.WithTimeout(tab, loadWithin.Duration())
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(proxy.URL()+session), live); err != nil {
			return fmt.Errorf("bench: load Atelier's session page: %w", err)
		}
		return t.page.Ready(loadWithin)
	}
	return t, nil
}

// ttydDropTerminal finds or builds ttyd, starts it behind a proxy and opens
// its page, or says why ttyd is not measured.
func (b *bench) ttydDropTerminal(browser context.Context) (t *dropTerminal, whyNot string) {
	bin, whyNot := findTTYD(b.ttydSrc, b.logw)
	if bin == "" {
		b.logf("ttyd: not measured: %s", whyNot)
		return nil, whyNot
	}
	// Leaving ttyd's page asks first, which would stop the next load.
	srv, err := startTTYD(bin, b.tmp, b.logw, "disableLeaveAlert=true")
	if err != nil {
		return nil, bin + " did not start: " + err.Error()
	}
	proxy, err := flakynet.Listen(srv.addr)
	if err != nil {
		srv.stop()
		return nil, "no proxy in front of it: " + err.Error()
	}
	tab, cancel, err := newTab(browser)
	if err != nil {
		proxy.Close()
		srv.stop()
		return nil, err.Error()
	}
	t = &dropTerminal{name: "ttyd", net: proxy, close: func() { cancel(); proxy.Close(); srv.stop() }}
	if t.page, err = termdrop.Prepare(tab, termdrop.TTYD); err != nil {
		t.close()
		return nil, err.Error()
	}
	t.ty = termdrop.NewTypist(t.page)
	// Each load is a new WebSocket, and ttyd starts a new shell for each.
	// The credential is in the address: ttyd asks for it (401), and the
	// browser keeps it for the origin and sends it with the WebSocket's
	// handshake too, as a person's browser does once they typed it. Headers
	// added through DevTools reach the page's requests but not that
	// handshake (Chromium 156), which ttyd then refused.
	t.open = func() error {
		ctx, cancel := context.WithTimeout(tab, loadWithin.Duration())
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate("http://"+srv.credential+"@"+proxy.Addr()+"/")); err != nil {
			return fmt.Errorf("bench: load ttyd's page: %w", err)
		}
		return t.page.Ready(loadWithin)
	}
	b.logf("ttyd: %s", bin)
	return t, ""
}
