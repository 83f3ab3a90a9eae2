// Package termdrop types numbered command lines into a terminal on a
// browser page, at a fast typist's pace, while a flakynet proxy drops the
// network under it, and tallies what reached the shell and what the page
// said meanwhile: the measure that Atelier's drop test (package server) and
// cmd/bench -drops (Atelier next to ttyd) share, so both products meet the
// same typing, the same network and the same count.
//
// It reads the page's xterm.js terminal itself, through a script added
// before the page's own, so a page that draws on a canvas (ttyd) is read as
// well as one that draws into the DOM (Atelier), and it keeps everything
// the page wrote into the terminal: a page that clears the screen when it
// reconnects (ttyd) does not hide what ran before.
package termdrop

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"atelier/testrig/flakynet"
	"atelier/testrig/wait"
)

// Product is a terminal page as this package reads it: what it says when
// its connection is in trouble.
type Product struct {
	Name string
	// Sign is a JavaScript expression for what the page shows of a
	// connection in trouble, "" while it shows nothing.
	Sign string
}

var (
	// Atelier's session page: the shown terminal's tab status, which says
	// "live" when all is well.
	Atelier = Product{Name: "Atelier", Sign: `(() => {
		const s = document.querySelector(".terminal-tab.current .terminal-status")?.textContent ?? "";
		return s === "live" ? "" : s;
	})()`}
	// TTYD is ttyd's page (1.7): a message in a box over the terminal
	// ("Connection Closed", "Reconnecting...", "Press ⏎ to Reconnect").
	// The box also flashes the size after a resize, "Reconnected" and a
	// pair of scissors after a copy, which say nothing of trouble.
	TTYD = Product{Name: "ttyd", Sign: `(() => {
		const el = window.term?.element;
		const box = el && [...el.children].find((c) => c.tagName === "DIV" && !c.className && c.style.position === "absolute");
		if (!box || !box.isConnected || box.style.opacity === "0") return "";
		const s = box.textContent;
		return /^\d+x\d+$|^Reconnected$|^\u2702$/.test(s) ? "" : s;
	})()`}
)

// prelude runs in every document of the tab before the page's scripts. It
// keeps the page's terminal as window.term (ttyd assigns it there itself;
// Atelier's pages make theirs through AtelierXterm.create, and the last one
// made is kept), keeps all the page writes into it in window.termTranscript,
// and notes every change of the product's sign, with its time, in
// window.termSigns: at every change of the page's DOM, so a sign that shows
// for a moment (reconnecting, for a stream that opens again at once) is
// not missed between two looks.
const prelude = `(() => {
	const decoder = new TextDecoder();
	window.termTranscript = "";
	const tap = (t) => {
		if (!t || t.termTapped) return t;
		t.termTapped = true;
		const write = t.write.bind(t);
		t.write = (data, done) => {
			window.termTranscript += typeof data === "string" ? data : decoder.decode(data, {stream: true});
			return write(data, done);
		};
		return t;
	};
	let term;
	Object.defineProperty(window, "term", {configurable: true, get: () => term, set: (t) => { term = tap(t); }});
	let xterm;
	Object.defineProperty(window, "AtelierXterm", {configurable: true, get: () => xterm, set: (x) => {
		xterm = Object.freeze({...x, create: (...args) => {
			const view = x.create(...args);
			window.term = view.terminal;
			return view;
		}});
	}});
	window.termSigns = [];
	let last = "";
	const note = () => {
		let s = "";
		try { s = (SIGN) || ""; } catch (_) { /* the page is not there yet */ }
		if (s !== last) {
			last = s;
			window.termSigns.push({at: Date.now(), text: s});
		}
	};
	new MutationObserver(note).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
	setInterval(note, 100);
})()`

// Page is one browser tab showing a product's terminal.
type Page struct {
	ctx     context.Context
	product Product
}

// Prepare readies the tab ctx to be read and typed into as product's page.
// Call it before the tab loads the page; it holds for every page the tab
// loads after.
func Prepare(ctx context.Context, product Product) (*Page, error) {
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdppage.AddScriptToEvaluateOnNewDocument,
			cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: strings.Replace(prelude, "SIGN", product.Sign, 1)})
		if err != nil {
			return err
		}
		// The page keeps the keyboard whichever tab the browser shows.
		_, err = cdp.Call(ctx, t, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true})
		return err
	}))
	if err != nil {
		return nil, fmt.Errorf("termdrop: prepare the tab: %w", err)
	}
	return &Page{ctx: ctx, product: product}, nil
}

// evaluate runs a JavaScript expression on the page within a few seconds:
// a page busy enough to take longer is itself a finding.
func evaluate[T any](p *Page, js string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// front brings the page's tab to the front of its browser: a tab behind
// another has its timers slowed to one a second, and its page falls far
// behind a typist.
func (p *Page) front() error {
	err := chromedp.Do(p.ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdppage.BringToFront, cdp.Empty{})
		return err
	}))
	if err != nil {
		return fmt.Errorf("termdrop: %s: bring the tab to the front: %w", p.product.Name, err)
	}
	return nil
}

// Ready brings the page's tab to the front and waits until the page has
// its terminal and the shell has written into it (its prompt), as a person
// waits for the prompt before typing: a page may take keys before its
// connection is open and drop them (ttyd's does).
func (p *Page) Ready(within wait.Span) error {
	if err := p.front(); err != nil {
		return err
	}
	var err error
	if !wait.Until(within, func() bool {
		var ok bool
		ok, err = evaluate[bool](p, `!!window.term?.textarea && window.termTranscript.length > 0`)
		return ok
	}) {
		return fmt.Errorf("termdrop: %s: no terminal with the shell's prompt on the page within %v (%v)", p.product.Name, within.Duration(), err)
	}
	return nil
}

// focus gives the terminal the keyboard unless it has it.
const focus = `(() => {
	const area = window.term?.textarea;
	if (!area) return false;
	if (area.getRootNode().activeElement !== area) area.focus();
	return true;
})()`

// typeKeys types keys as a person's keyboard does: for each, a key going down
// with its text and coming up, as Chromium hears them from the system, so
// the page's own key handlers (ttyd's Enter that reconnects) see them too.
func (p *Page) typeKeys(keys string) error {
	ok, err := evaluate[bool](p, focus)
	if err != nil || !ok {
		return fmt.Errorf("termdrop: %s: no terminal to type into (%v)", p.product.Name, err)
	}
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	err = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			k := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: string(r), Text: string(r)}
			if r == '\r' {
				k.Key, k.Code, k.WindowsVirtualKeyCode = "Enter", "Enter", 13
			}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, k); err != nil {
				return err
			}
			k.Type, k.Text = input.DispatchKeyEventTypeKeyUp, ""
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, k); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		return fmt.Errorf("termdrop: %s: type: %w", p.product.Name, err)
	}
	return nil
}

// sign is what the page shows now of a connection in trouble, "" when
// nothing.
func (p *Page) sign() (string, error) {
	return evaluate[string](p, p.product.Sign)
}

// Sign is one change of what the page says of its connection.
type Sign struct {
	At   time.Time
	Text string
}

// signs are the changes of the page's sign at or after since.
func (p *Page) signs(since time.Time) ([]Sign, error) {
	type seen struct {
		At   int64  `json:"at"`
		Text string `json:"text"`
	}
	all, err := evaluate[[]seen](p, fmt.Sprintf(`window.termSigns.filter((e) => e.at >= %d)`, since.UnixMilli()))
	if err != nil {
		return nil, err
	}
	out := make([]Sign, len(all))
	for i, s := range all {
		out[i] = Sign{At: time.UnixMilli(s.At), Text: s.Text}
	}
	return out, nil
}

// Said is when the page's sign first held text at or after since, the zero
// time if it has not.
func (p *Page) Said(text string, since time.Time) (time.Time, error) {
	all, err := p.signs(since)
	for _, s := range all {
		if strings.Contains(s.Text, text) {
			return s.At, err
		}
	}
	return time.Time{}, err
}

// transcriptMark is where the page's transcript ends now, for reading what
// comes after it.
func (p *Page) transcriptMark() (int, error) {
	return evaluate[int](p, `window.termTranscript.length`)
}

func (p *Page) transcriptSince(mark int) (string, error) {
	return evaluate[string](p, fmt.Sprintf(`window.termTranscript.slice(%d)`, mark))
}

// shownRows is the terminal's rows as they show now (the viewport, not
// the scrollback).
const shownRows = `(() => {
	const t = window.term;
	if (!t) return "";
	const b = t.buffer.active, out = [];
	for (let i = b.viewportY; i < b.viewportY + t.rows; i++) {
		const l = b.getLine(i);
		if (l) out.push(l.translateToString(true));
	}
	return out.join("\n");
})()`

// screen is the terminal's rows as they show now.
func (p *Page) screen() (string, error) {
	return evaluate[string](p, shownRows)
}

// escapes are the terminal control sequences a shell's output carries
// around its text: CSI (colours, bracketed paste), OSC (the window title)
// and the two-byte ones.
var escapes = regexp.MustCompile("\x1b\\[[0-9;?<=>]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)|\x1b[@-Z\\\\-_]")

// lines are the text lines of terminal output (a transcript or the screen),
// each split at carriage returns into the pieces written over each other,
// trimmed, control sequences gone.
func lines(text string) [][]string {
	var out [][]string
	for _, l := range strings.Split(escapes.ReplaceAllString(text, ""), "\n") {
		pieces := strings.Split(l, "\r")
		for i, s := range pieces {
			pieces[i] = strings.TrimSpace(s)
		}
		out = append(out, pieces)
	}
	return out
}

// shellMark is what the shell answers to shellQuestion: its process ID.
var shellMark = regexp.MustCompile(`^shell-(\d+)$`)

const shellQuestion = "echo shell-$$\r"

// shell asks the shell for its process ID and answers it, and how many
// times it had to ask: a page that reconnects on Enter (ttyd) takes the
// first question as that Enter. Each ask waits within for the answer; 0
// after tries asks means no shell answered.
func (p *Page) shell(within wait.Span, tries int) (pid, asked int, err error) {
	for asked = 1; asked <= tries; asked++ {
		if pid, err = p.askShell(within); pid != 0 || err != nil {
			return pid, asked, err
		}
	}
	return 0, tries, nil
}

// askShell asks the shell once and waits within for its answer (0: none).
func (p *Page) askShell(within wait.Span) (pid int, err error) {
	mark, err := p.transcriptMark()
	if err != nil {
		return 0, err
	}
	if err := p.typeKeys(shellQuestion); err != nil {
		return 0, err
	}
	wait.Until(within, func() bool {
		var out string
		if out, err = p.transcriptSince(mark); err != nil {
			return true
		}
		pid = shellAnswer(out)
		return pid != 0
	})
	return pid, err
}

// shellAnswer is the process ID of the first answer to shellQuestion in
// text, 0 if none.
func shellAnswer(text string) int {
	for _, l := range lines(text) {
		for _, s := range l {
			if m := shellMark.FindStringSubmatch(s); m != nil {
				pid, _ := strconv.Atoi(m[1])
				return pid
			}
		}
	}
	return 0
}

// A Typist types numbered command lines, 3 keys every 100 ms (30 keys a
// second, a fast typist's pace), each line's output a number its echo does
// not show: line n is `echo $((1000+n))`, its output 1000+n.
type Typist struct {
	page  *Page
	lines []int  // the numbers of the lines begun, in order
	rest  string // what is left to type of the current line
	keys  int    // keys typed in all
}

// NewTypist is a typist at page, its first line numbered 1.
func NewTypist(page *Page) *Typist { return &Typist{page: page} }

const (
	keysPerTick = 3
	typingTick  = 100 * time.Millisecond
)

// commandLine is line n as typed.
func commandLine(n int) string { return fmt.Sprintf("echo $((1000+%d))\r", n) }

// typeFor types for d, and on to the end of the line it is in.
func (ty *Typist) typeFor(d time.Duration) error {
	end := time.Now().Add(d)
	next := time.Now()
	for ty.rest != "" || time.Now().Before(end) {
		if ty.rest == "" {
			n := len(ty.lines) + 1
			ty.lines = append(ty.lines, n)
			ty.rest = commandLine(n)
		}
		k := min(keysPerTick, len(ty.rest))
		if err := ty.page.typeKeys(ty.rest[:k]); err != nil {
			return err
		}
		ty.rest = ty.rest[k:]
		ty.keys += k
		next = next.Add(typingTick)
		time.Sleep(time.Until(next))
	}
	return nil
}

// output is a line's output at the end of a piece of a row: keys typed
// ahead, which the terminal echoes as they come while a command runs, may
// stand before it on its row ("0+51003" is keys of a later line, then line
// 3's output). No piece of a typed line ends in four digits but 1000, and
// the shell's answer to shellQuestion is told apart before.
var output = regexp.MustCompile(`1\d{3}$`)

// outputs are the numbered lines whose outputs text shows, in order, each
// time it shows one.
func outputs(text string) []int {
	var got []int
	for _, l := range lines(text) {
		for _, s := range l {
			if shellMark.MatchString(s) {
				continue
			}
			if m := output.FindString(s); m != "" {
				if n, _ := strconv.Atoi(m); n > 1000 {
					got = append(got, n-1000)
					break
				}
			}
		}
	}
	return got
}

// A Drop is how the network fails under the typist.
type Drop struct {
	Mode flakynet.Mode
	// Hold is called when the typing into the drop is over and returns
	// when the network is to come back (dropped is when it went); an
	// error ends the measure.
	Hold func(dropped time.Time) error
	// Recover bounds the wait, once the network is back, for the last
	// line's output.
	Recover wait.Span
}

// Figures are what one drop measured.
type Figures struct {
	Mode  flakynet.Mode
	Typed int   // keys typed from a second before the drop to its end
	Lines []int // the lines typed then, in order
	// Ran are the lines whose outputs the page showed, in the order it
	// showed them, each time it did: Lines exactly when every key reached
	// the shell once and in order.
	Ran []int
	// OnScreen are the outputs of Lines the screen still shows at the end.
	OnScreen []int
	// The drop, the network's return and the last line's output (zero
	// when it did not show within Drop.Recover).
	Dropped, Returned, Shown time.Time
	// Signs are every change of what the page said of its connection
	// from the drop to the end of the wait for the output ("": it said
	// nothing any more), LastSign what it said then.
	Signs              []Sign
	LastSign           string
	ShellBefore, Shell int // the shell's process ID before the drop and after (0: no answer)
	Asked              int // questions it took to get the shell's answer after the drop
}

// Delivered is the keys of the lines that ran, each time they ran.
func (f Figures) Delivered() int {
	n := 0
	for _, l := range f.Ran {
		n += len(commandLine(l))
	}
	return n
}

// Tally is how many of the lines typed ran once, more than once, and not
// at all.
func (f Figures) Tally() (once, more, never int) {
	count := map[int]int{}
	for _, l := range f.Ran {
		count[l]++
	}
	for _, l := range f.Lines {
		switch count[l] {
		case 0:
			never++
		case 1:
			once++
		default:
			more++
		}
	}
	return once, more, never
}

// Through types through one drop of the network net carries to the page:
// it asks the shell for its process ID, types a second with the network
// passing, fails it as d says and types 3 s more into the drop (to the end
// of a line), holds the drop, brings the network back, waits for the last
// line's output and asks the shell again (twice if need be, 10 s each).
func (ty *Typist) Through(net *flakynet.Proxy, d Drop) (Figures, error) {
	f := Figures{Mode: d.Mode}
	if err := ty.page.front(); err != nil {
		return f, err
	}
	var err error
	if f.ShellBefore, _, err = ty.page.shell(wait.Long, 1); err != nil {
		return f, err
	}
	if f.ShellBefore == 0 {
		screen, _ := ty.page.screen()
		return f, fmt.Errorf("termdrop: %s: the shell did not answer before the drop; the screen:\n%s", ty.page.product.Name, strings.TrimRight(screen, "\n"))
	}
	mark, err := ty.page.transcriptMark()
	if err != nil {
		return f, err
	}
	first, keys := len(ty.lines), ty.keys
	if err := ty.typeFor(time.Second); err != nil {
		return f, err
	}
	f.Dropped = time.Now()
	net.Set(d.Mode)
	err = ty.typeFor(3 * time.Second)
	if err == nil {
		err = d.Hold(f.Dropped)
	}
	f.Returned = time.Now()
	net.Set(flakynet.Pass)
	if err != nil {
		return f, err
	}
	f.Typed, f.Lines = ty.keys-keys, ty.lines[first:]
	last := f.Lines[len(f.Lines)-1]

	var out string
	if wait.Until(d.Recover, func() bool {
		if out, err = ty.page.transcriptSince(mark); err != nil {
			return true
		}
		for _, n := range outputs(out) {
			if n == last {
				return true
			}
		}
		return false
	}) && err == nil {
		f.Shown = time.Now()
	}
	if err != nil {
		return f, err
	}
	if f.LastSign, err = ty.page.sign(); err != nil {
		return f, err
	}
	if f.Signs, err = ty.page.signs(f.Dropped); err != nil {
		return f, err
	}
	// Once more, in case the output came as the wait ended.
	if out, err = ty.page.transcriptSince(mark); err != nil {
		return f, err
	}
	f.Ran = outputs(out)
	screen, err := ty.page.screen()
	if err != nil {
		return f, err
	}
	for _, n := range outputs(screen) {
		if slices.Contains(f.Lines, n) {
			f.OnScreen = append(f.OnScreen, n)
		}
	}
	f.Shell, f.Asked, err = ty.page.shell(wait.Span(10*time.Second), 2)
	return f, err
}
