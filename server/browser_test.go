package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atelier/meter"
	"atelier/testrig/chromium"
	"atelier/testrig/wait"
)

// browser starts a headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel, err := chromium.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return ctx
}

// screenshot saves the page as name.png in the folder ATELIER_SCREENSHOTS
// names (the README's come from `ATELIER_SCREENSHOTS=$PWD/docs`), else in
// the test's own folder, so a plain test run leaves the tree alone.
func screenshot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ATELIER_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}

// typeInto focuses the element sel names and types text into it.
// chromedp.SendKeys reads the node's attributes without its lock, a data
// race whenever the page changes them meanwhile (htmx and the finder do).
func typeInto(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Focus(chromedp.CSS(sel), chromedp.NodeVisible), chromedp.KeyEvent(text))
}

// signIn signs the browser in through the form and waits for the projects
// page.
func signIn(h *harness, username, password string) chromedp.Action[chromedp.Void] {
	return signInAt(h.srv.URL, username, password)
}

// signInAt is signIn at the server's address base, for a browser that
// reaches it another way (through a proxy).
func signInAt(base, username, password string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(base+"/login"),
		typeInto(`input[name=username]`, username),
		typeInto(`input[name=password]`, password),
		chromedp.Submit(chromedp.CSS(`form.stack`)),
		chromedp.WaitVisible(chromedp.CSS(`a.button[href="/projects/new"]`)),
	)
}

// shows waits until an element matching sel is on the page and displayed.
func shows(sel string) chromedp.Action[chromedp.Void] {
	return untilPage(fmt.Sprintf(
		`(() => { const e = document.querySelector(%q); return !!e && e.getClientRects().length > 0 })()`, sel))
}

// showsText waits until the element matching sel holds text.
func showsText(sel, text string) chromedp.Action[chromedp.Void] {
	return untilPage(fmt.Sprintf(
		`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q) })()`, sel, text))
}

// untilPage waits until the JavaScript predicate holds. It asks the page
// itself instead of holding a node: htmx swaps the panels of a session page
// whenever something changes, and a node found just before a swap is gone
// when the browser is asked about it.
func untilPage(predicate string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](predicate)
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		var err error
		// A page still navigating has no document to ask yet, or its old
		// one goes while it is asked (-32000); the caller's context bounds
		// the asking.
		wait.Until(wait.Long, func() bool {
			_, err = poll(ctx, t)
			return err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "(-32000)")
		})
		return chromedp.Void{}, err
	}
}

// do runs steps with a deadline, leaving the browser usable afterwards so a
// failure can describe the page.
func do(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, wait.Long.Duration())
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// A person signs in, picks Local, types a bad folder and sees the reason
// appear as they type, fixes it, creates the project and lands on its page.
func TestBrowserCreateLocalProject(t *testing.T) {
	h := newHarness(t, localRootsOfTest(t))
	if _, err := h.app.Auth.CreateUser(t.Context(), "ann", "ann-password", false); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(t.TempDir(), "my-code")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	err := do(ctx,
		signIn(h, "ann", "ann-password"),
		chromedp.Click(css(`a.button[href="/projects/new"]`)),
		chromedp.WaitVisible(css(`input[name=name]`)),
		typeInto(`input[name=name]`, "Browser Made"),
		chromedp.Click(css(`input[name=mode][value=local]`)),
		chromedp.WaitVisible(css(`#path`)),
		typeInto(`#path`, "/etc/ssh"),
		chromedp.WaitVisible(css(`#path-check .check.bad`)),
	)
	if err != nil {
		t.Fatalf("typing a bad folder: %v; the page has %s", err, pageState(ctx))
	}
	if reason, err := chromedp.Run(ctx, chromedp.AttributeValue(css(`#path-check .check`), "data-reason")); err != nil || reason.Value != "path_system" {
		t.Fatalf("live reason for /etc/ssh = %q (%v), want path_system", reason.Value, err)
	}

	err = do(ctx,
		typeInto(`#path`, strings.Repeat(kb.Backspace, len("/etc/ssh"))),
		typeInto(`#path`, folder),
		chromedp.WaitVisible(css(`#path-check .check.ok`)),
	)
	if err != nil {
		t.Fatalf("fixing the folder: %v; the page has %s", err, pageState(ctx))
	}
	if reason, err := chromedp.Run(ctx, chromedp.AttributeValue(css(`#path-check .check`), "data-reason")); err != nil || reason.Value != "ok" {
		t.Fatalf("live verdict for a good folder = %q (%v)", reason.Value, err)
	}

	if err := do(ctx, chromedp.Submit(css(`form.new-project`)), chromedp.WaitVisible(css(`section.project h1`))); err != nil {
		t.Fatalf("creating: %v", err)
	}
	title, err := chromedp.Run(ctx, chromedp.Text(css(`section.project h1`)))
	if err != nil || !strings.HasPrefix(strings.TrimSpace(title), "Browser Made") {
		t.Fatalf("landed on a page titled %q (%v)", title, err)
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || !regexp.MustCompile(`/projects/\d+$`).MatchString(location) {
		t.Fatalf("landed on %s (%v), want the project page", location, err)
	}
	path, err := chromedp.Run(ctx, chromedp.Text(css(`.facts code.path`)))
	if err != nil || path != folder {
		t.Fatalf("project page shows folder %q (%v), want %q", path, err, folder)
	}
}

// pageState describes the form for a failure message.
func pageState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`JSON.stringify({url: location.href, path: document.querySelector("#path")?.value, check: document.querySelector("#path-check")?.innerHTML})`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return state
}

// A member opens the Code page, expands folders lazily, opens a file and sees
// it highlighted with line numbers; the address follows the file.
func TestBrowserCodePage(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("browse")
	res := owner.upload(id, "src.tar.gz", tarGz(t, []entry{
		{name: "cmd/tool/main.go", body: "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }\n"},
		{name: "README.md", body: "# Browse\n"},
	}), jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := h.app.Auth.CreateUser(t.Context(), "reader", "reader-password", false); err != nil {
		t.Fatal(err)
	}
	owner.addMember(id, "reader", "member")

	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	err := do(ctx,
		signIn(h, "reader", "reader-password"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.WaitVisible(css(`summary[data-path="cmd"]`)),
		chromedp.Click(css(`summary[data-path="cmd"]`)),
		chromedp.WaitVisible(css(`summary[data-path="cmd/tool"]`)),
		chromedp.Click(css(`summary[data-path="cmd/tool"]`)),
		chromedp.WaitVisible(css(`a[data-path="cmd/tool/main.go"]`)),
		chromedp.Click(css(`a[data-path="cmd/tool/main.go"]`)),
		chromedp.WaitVisible(css(`#viewer .chroma`)),
	)
	if err != nil {
		t.Fatalf("browsing: %v; the page has %s", err, pageState(ctx))
	}
	keyword, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`getComputedStyle(document.querySelector("#viewer .chroma .kd, #viewer .chroma .kn")).color`))
	if err != nil || keyword == "" || keyword == "rgb(0, 0, 0)" || keyword == "rgb(29, 35, 48)" {
		t.Fatalf("keywords are not coloured: %q %v", keyword, err)
	}
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#viewer .chroma .lnt, #viewer .chroma .ln").length`))
	if err != nil || lines != 5 {
		t.Fatalf("%d line numbers, want 5 (%v)", lines, err)
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	u, perr := url.Parse(location)
	if err != nil || perr != nil || !strings.HasSuffix(u.Path, "/code") || u.Query().Get("path") != "cmd/tool/main.go" {
		t.Fatalf("address %q (%v) does not follow the open file", location, err)
	}
}

// A person opens a session from the Code page, edits in CodeMirror, saves
// with Ctrl-S, reloads and finds the edit, sees the diff, and discards.
func TestBrowserEditSession(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	err := do(ctx,
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.Click(css(`button#edit`)),
		chromedp.WaitReady(css(`#session[data-started]`)), // session.js listens
		chromedp.Click(css(`#panel-tab-changes`)),
		shows(`#changes h2`), // htmx has loaded the panels
		// The tree may be swapped by a refresh at any moment; a click by
		// script finds the link as it is now.
		shows(`#session a.open-file[data-path="README.md"]`),
	)
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#session a.open-file[data-path="README.md"]').click(); true`))
	}
	if err != nil {
		t.Fatalf("opening a session: %v; the page has %s", err, pageState(ctx))
	}
	sessionURL, _ := chromedp.Run(ctx, chromedp.Location())
	// The editor lives in a shadow root (its styles pass the page's CSP
	// there), so it is reached through script.
	const content = `document.querySelector("#editor")?.shadowRoot?.querySelector(".cm-content")`
	editorText := func() string {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(`+content+`)?.innerText ?? ""`))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if !wait.Until(wait.Long, ok) {
			t.Fatalf("waited %v for %s; the page has %s", wait.Long.Duration(), what, pageState(ctx))
		}
	}
	waitFor("the file in the editor", func() bool { return strings.Contains(editorText(), "# Base") })

	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(`+content+`).focus(); true`)); err != nil {
		t.Fatal(err)
	}
	err = do(ctx,
		chromedp.KeyEvent(kb.End),
		chromedp.KeyEvent(" from the browser"),
		chromedp.KeyEvent("s", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
	)
	if err != nil {
		t.Fatalf("typing: %v", err)
	}
	status := func() string {
		s, _ := chromedp.Run(ctx, chromedp.Text(css(`#editor-status`)))
		return s
	}
	waitFor("saved", func() bool {
		return strings.Contains(strings.ToLower(status()), "saved") && !strings.Contains(strings.ToLower(status()), "unsaved")
	})

	// The edit is in the database: a reload shows it.
	u, _ := url.Parse(sessionURL)
	if err := do(ctx, chromedp.Navigate(h.srv.URL+u.Path+"?path=README.md")); err != nil {
		t.Fatal(err)
	}
	waitFor("the saved edit after a reload", func() bool { return strings.Contains(editorText(), "from the browser") })

	err = do(ctx,
		chromedp.Click(css(`#panel-tab-changes`)),
		shows(`#changes li.modified a`),
		chromedp.Click(css(`#changes li.modified a`)),
		shows(`#diff pre.unified .add`),
	)
	if err != nil {
		t.Fatalf("diff: %v; the page has %s", err, pageState(ctx))
	}
	added, _ := chromedp.Run(ctx, chromedp.Text(css(`#diff pre.unified .add`)))
	if !strings.Contains(added, "from the browser") {
		t.Fatalf("the diff's added line is %q", added)
	}

	// Discard: confirmed inline, back on the Code page, and the session is gone.
	err = do(ctx,
		chromedp.Click(css(`#discard`)),
		shows(`#discard-confirm`),
		chromedp.Click(css(`#discard-yes`)),
		chromedp.WaitVisible(css(`button#edit`)),
	)
	if err != nil {
		t.Fatalf("discard: %v; the page has %s", err, pageState(ctx))
	}
	expectProblem(t, owner.get(u.Path, jsonAccept), http.StatusGone, "discarded")
}

// The idle warning follows the server's clock: when the server says the
// session has 30 s left, the page warns though the tab's own clock has
// barely moved, and "Keep working" moves the deadline on the server.
func TestBrowserIdleWarning(t *testing.T) {
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	err := do(ctx,
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base),
		showsText(`#changes h2`, "Changes"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if hidden, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#idle-warning").hidden`)); !hidden {
		t.Fatal("the idle warning shows on a fresh session")
	}
	h.clock.Advance(9*time.Minute + 30*time.Second)
	// A request that is not activity brings the server's clock to the page.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`htmx.ajax("GET", "`+base+`/changes", "#changes"); true`)); err != nil {
		t.Fatal(err)
	}
	if err := do(ctx, chromedp.WaitVisible(css(`#idle-warning`))); err != nil {
		t.Fatalf("no idle warning with 30 s left on the server's clock: %v", err)
	}
	countdown, _ := chromedp.Run(ctx, chromedp.Text(css(`#idle-countdown`)))
	if countdown == "" || strings.Contains(countdown, "9:") {
		t.Fatalf("countdown %q", countdown)
	}
	if err := do(ctx, chromedp.Click(css(`#keep-working`)), chromedp.WaitNotVisible(css(`#idle-warning`))); err != nil {
		t.Fatalf("keep working: %v", err)
	}
	// The server moved the deadline: 9 more minutes later the session lives.
	h.clock.Advance(9 * time.Minute)
	if _, _, status := owner.read(base, "README.md"); status != http.StatusOK {
		t.Fatalf("after keep working the session ended: %d", status)
	}
}

// A person opens a terminal, types `echo`, sees the answer, prints text
// with a byte that is not UTF-8 in it (so the stream sends text and out
// events), sees the text, reloads the page and finds the same scrollback.
func TestBrowserTerminal(t *testing.T) {
	needRoot(t)
	browserTerminal(t, newHarness(t))
}

func TestBrowserTerminalInAPod(t *testing.T) {
	needRoot(t)
	browserTerminal(t, newHarness(t, onKube(t)))
}

func browserTerminal(t *testing.T, h *harness) {
	_, id := editable(t, h)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	// A window of a laptop's size: in headless Chromium's own 800x600 the
	// terminal has four rows, so the prompt bash draws again after a
	// resize scrolls the screen by a row between the two readings.
	if err := do(ctx, chromedp.EmulateViewport(1280, 800), signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.Click(css(`button#edit`)),
		chromedp.WaitReady(css(`#terminals[data-started]`)), // terminal.js is listening
		chromedp.Click(css(`#new-terminal`)),
	); err != nil {
		t.Fatalf("opening a terminal: %v; the page has %s", err, pageState(ctx))
	}
	const rows = `(document.querySelector(".terminal-pane:not([hidden])")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "")`
	screen := func() string {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](rows))
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	waitScreen := func(what string, ok func(string) bool) string {
		t.Helper()
		var s string
		if !wait.Until(wait.Long, func() bool { s = screen(); return ok(s) }) {
			state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({panes: document.querySelectorAll(".terminal-pane").length, tabs: document.querySelector("#terminal-tabs").innerText, error: document.querySelector("#terminal-error").innerText})`))
			t.Fatalf("waited %v for %s; the terminal shows %q; the page has %s", wait.Long.Duration(), what, screen(), state)
		}
		return s
	}
	waitScreen("a prompt", func(s string) bool { return strings.Contains(s, "$") })
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector(".terminal-pane:not([hidden])").shadowRoot.querySelector(".xterm-helper-textarea").focus(); true`)); err != nil {
		t.Fatal(err)
	}
	// Text arrives as an input method would insert it: key events carry
	// both a keydown and a char, which xterm would read twice.
	insert := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: "echo hi-$((40+2))"})
		return err
	})
	if err := do(ctx, insert, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	waitScreen("the echo", func(s string) bool { return strings.Contains(s, "\nhi-42") || strings.HasPrefix(s, "hi-42") })
	// One write: "café été \xff" goes as an out event (text that short
	// does not pay for an event of its own), the rest as text; xterm drops
	// \xff, as it would from any terminal's bytes.
	printf := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: `printf 'caf\303\251 \303\251t\303\251 \377\342\202\254 mixed\n'`})
		return err
	})
	if err := do(ctx, printf, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	const mixed = "café été € mixed"
	before := waitScreen("the mixed output", func(s string) bool { return strings.Contains(s, mixed) })

	location, _ := chromedp.Run(ctx, chromedp.Location())
	// Every key acknowledged first: a page with keys unsent asks before it
	// is left, and that question would hold the reload.
	if err := do(ctx, untilPage(`!Object.keys(sessionStorage).some((k) => k.startsWith("atelier.terminal-input."))`)); err != nil {
		t.Fatalf("keys still unsent before the reload: %v", err)
	}
	// xterm paints only while its pane is on screen, so scroll to it as a
	// person would.
	if err := do(ctx, chromedp.Navigate(location), chromedp.WaitVisible(css(`#terminal-tabs button`)), chromedp.ScrollIntoView(css(`#terminal-panes`))); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// The reloaded page may be a different size; bash redraws its prompt
	// on the resize, so the screen starts with the old scrollback and may
	// end with one more prompt.
	trim := func(s string) string { return strings.TrimRight(s, " \n\u00a0") }
	after := waitScreen("the scrollback after a reload", func(s string) bool { return strings.HasPrefix(trim(s), trim(before)) })
	if !strings.Contains(before, "hi-42") {
		t.Fatalf("the screen before the reload does not start at the first command: %q", before)
	}
	if !strings.Contains(after, mixed) {
		t.Fatalf("scrollback after reload: %q", after)
	}
}

// The command box runs a command and shows its result, the history and the
// month's meter; the tree and the changes follow what the command did.
func TestBrowserCommand(t *testing.T) {
	needRoot(t)
	browserCommand(t, newHarness(t))
}

func TestBrowserCommandInAPod(t *testing.T) {
	needRoot(t)
	browserCommand(t, newHarness(t, onKube(t)))
}

func browserCommand(t *testing.T, h *harness) {
	_, id := editable(t, h)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	err := do(ctx, signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.Click(css(`button#edit`)),
		showsText(`#changes h2`, "Changes"),
		chromedp.WaitReady(css(`#session[data-started]`)), // session.js listens
		chromedp.Click(css(`#panel-tab-command`)),
		typeInto(`input[name=command]`, "echo made > made.txt; echo from-the-box"),
		chromedp.Click(css(`form.command button`)),
		shows(`.command-result pre.stdout`),
		chromedp.Click(css(`#panel-tab-changes`)),
		shows(`#changes li.added[data-path="made.txt"]`),
		shows(`#session-tree a[data-path="made.txt"]`),
		chromedp.Click(css(`#panel-tab-command`)),
		// The history follows the command's end, when its time is settled.
		showsText(`#command-history`, "echo made > made.txt"),
		showsText(`#command-history`, "Sandbox time this month: 2 of 1200 min"),
	)
	if err != nil {
		t.Fatalf("running from the box: %v; the page has %s", err, pageState(ctx))
	}
	result, _ := chromedp.Run(ctx, chromedp.Text(css(`.command-result`)))
	history, _ := chromedp.Run(ctx, chromedp.Text(css(`#command-history`)))
	if !strings.Contains(result, "exit 0") || !strings.Contains(result, "from-the-box") ||
		!strings.Contains(history, "echo made > made.txt") || !strings.Contains(history, "Sandbox time this month: 2 of 1200 min") {
		t.Fatalf("result %q, history %q", result, history)
	}
}

// Files whose names are URL syntax open from the Code page's tree and in an
// edit session's editor, each with its own content; and the viewer keeps
// every line number beside its line, down to the last of a long file.
func TestBrowserOddFileNames(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := importOddNames(t, owner)
	const long = "long.txt"
	var longText strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&longText, "line %d: ü → \t%s\n", i, strings.Repeat("x", i%97))
	}
	if res := owner.upload(id, "more.tar.gz", tarGz(t, append(oddEntries(), entry{name: long, body: longText.String()})), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}

	ctx := browser(t)
	js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if !wait.Until(wait.Long, ok) {
			t.Fatalf("waited %v for %s; the page is at %s", wait.Long.Duration(), what, eval(`location.href`))
		}
	}
	// click finds the element of selector whose data-path is p as the page
	// is now (htmx swaps the tree) and clicks it.
	click := func(selector, p string) {
		t.Helper()
		waitFor("a link to "+p, func() bool {
			return eval(`(() => { const e = [...document.querySelectorAll(`+js(selector)+`)].find(e => e.dataset.path === `+js(p)+`); if (!e) return "no"; e.click(); return "yes"; })()`) == "yes"
		})
	}

	if err := do(ctx, signIn(h, "owner", "password-owner"), chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code")); err != nil {
		t.Fatal(err)
	}
	click(`.tree-pane summary`, oddFolder)
	for _, name := range append(oddNames, oddFolder+"/in+side.txt") {
		click(`.tree-pane li.file a`, name)
		want := strings.TrimSpace(contentOf(name))
		waitFor("the viewer to show "+name, func() bool {
			return eval(`document.querySelector("#viewer article.file")?.dataset.path ?? ""`) == name &&
				strings.Contains(eval(`document.querySelector("#viewer .highlight, #viewer .markdown")?.innerText ?? ""`), want) // a&path=README.md is Markdown
		})
		if got := eval(`new URL(location.href).searchParams.get("path") ?? ""`); got != name {
			t.Errorf("%q: the address names %q", name, got)
		}
		// The viewer's own link downloads this file.
		download := eval(`(async () => (await fetch(document.querySelector("#viewer a.download").href)).text())()`)
		if download != contentOf(name) {
			t.Errorf("%q: the viewer's download gives %q", name, download)
		}
	}
	// The address the viewer pushed opens the same file on a fresh load.
	if err := do(ctx, chromedp.Navigate(eval(`location.href`))); err != nil {
		t.Fatal(err)
	}
	if got := eval(`document.querySelector("#viewer article.file")?.dataset.path ?? ""`); got != oddFolder+"/in+side.txt" {
		t.Errorf("reloading the viewer's address shows %q", got)
	}

	// Each line number sits beside its line, to the end of a long file.
	click(`.tree-pane li.file a`, long)
	waitFor("the long file", func() bool { return eval(`document.querySelector("#viewer article.file")?.dataset.path ?? ""`) == long })
	var drift struct {
		Numbers, Lines int
		Number, Line   float64
		Text           string
	}
	raw := eval(`(() => {
		const nums = document.querySelectorAll("#viewer .chroma .ln, #viewer .chroma .lnt");
		const lines = document.querySelectorAll("#viewer .chroma .line");
		const n = nums[nums.length - 1], l = lines[lines.length - 1];
		return JSON.stringify({numbers: nums.length, lines: lines.length, text: n.innerText.trim(),
			number: n.getBoundingClientRect().top, line: l.getBoundingClientRect().top});
	})()`)
	if err := json.Unmarshal([]byte(raw), &drift); err != nil {
		t.Fatal(err)
	}
	if drift.Numbers != 3000 || drift.Lines != 3000 || drift.Text != "3000" || math.Abs(drift.Number-drift.Line) > 1 {
		t.Fatalf("the last line number sits %.1f px from its line: %+v", drift.Number-drift.Line, drift)
	}

	// In an edit session, each opens in the editor with its own text.
	if err := do(ctx, chromedp.Click(chromedp.CSS(`button#edit`)), chromedp.WaitReady(chromedp.CSS(`#session[data-started]`))); err != nil {
		t.Fatalf("opening a session: %v", err) // session.js is listening
	}
	const editor = `(document.querySelector("#editor").shadowRoot?.querySelector(".cm-content")?.innerText ?? "")`
	click(`#session-tree summary`, oddFolder)
	for _, name := range append(oddNames, oddFolder+"/in+side.txt") {
		click(`#session-tree a.open-file`, name)
		want := strings.TrimSpace(contentOf(name))
		waitFor("the editor to open "+name, func() bool {
			return eval(`document.querySelector("#editor-path").textContent`) == name && strings.TrimSpace(eval(editor)) == want
		})
	}
}

// A site admin watches the dashboard while someone runs a command: the
// project's meter moves on the open page within a second of the
// reservation and again within a second of the settlement, without a
// reload, over the tab's one live stream.
func TestBrowserDashboardMeterMoves(t *testing.T) {
	needRoot(t)
	browserDashboardMeterMoves(t, newHarness(t))
}

func TestBrowserDashboardMeterMovesInAPod(t *testing.T) {
	needRoot(t)
	browserDashboardMeterMoves(t, newHarness(t, onKube(t)))
}

func browserDashboardMeterMoves(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	h.user("root", true)
	_, base := owner.session(id)
	ctx := browser(t)
	row := `#meter-` + itoa(id)
	err := do(ctx, signIn(h, "root", "password-root"),
		chromedp.Navigate(h.srv.URL+"/admin"),
		shows(row),
	)
	if err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	// Under a loaded CI machine the deferred hx-sse script may take a
	// while; a reconnect may briefly overlap the stream it replaces.
	wait.For(t, wait.Long, "the tab to follow the live stream", func() bool { return h.app.Events.Followers() >= 1 })
	attr := func(name string) string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("`+row+`")?.dataset.`+name+` ?? ""`))
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return v
	}
	if used, reserved := attr("used"), attr("reserved"); used != "0" || reserved != "0" {
		t.Fatalf("before: used %s reserved %s", used, reserved)
	}
	// moves waits until the row shows want, and fails past a second.
	moves := func(name, want string, since time.Time) {
		t.Helper()
		if !wait.Until(wait.Span(time.Until(since.Add(time.Second))), func() bool { return attr(name) == want }) {
			t.Fatalf("the dashboard's %s is %s a second after the change, want %s", name, attr(name), want)
		}
		t.Logf("%s moved to %s after %v", name, want, time.Since(since).Round(time.Millisecond))
	}

	done := make(chan commandJSON, 1)
	go func() {
		out, _ := owner.run(base, "sleep 2; echo ran", "")
		done <- out
	}()
	// The second runs from the reservation itself: a command may first
	// wait for the session's preparation, which is not the dashboard's lag.
	wait.For(t, wait.Long, "the command's reservation", func() bool {
		u, err := h.app.Meter.Usage(t.Context(), id)
		return err == nil && u.Reserved == meter.Chunk
	})
	moves("reserved", strconv.FormatInt(meter.Chunk, 10), time.Now())
	out := <-done
	ended := time.Now()
	if !strings.Contains(out.Stdout, "ran") {
		t.Fatalf("command: %+v", out)
	}
	// The answer does not wait for the meter's settling.
	var u meter.Usage
	wait.For(t, wait.Short, "the command's sandbox time settled", func() bool {
		var err error
		u, err = h.app.Meter.Usage(t.Context(), id)
		return err == nil && u.Used > 0
	})
	moves("used", strconv.FormatInt(u.Used, 10), ended)
	moves("reserved", "0", ended)
	if text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#commands`))); !strings.Contains(text, "sleep 2; echo ran") || strings.Contains(text, "\nran") {
		t.Errorf("the commands panel reads %q: the command, never its output", text)
	}
	if err := do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	screenshot(ctx, t, "dashboard")
}

// A person edits two files and adds one (by a command in the session),
// submits with a message, and watches the Change verify and release live
// on its page; the Code page then shows the new tree.
func TestBrowserSubmitAndRelease(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	runPipeline(t, h)
	owner, id := editable(t, h)
	owner.setCheck(id, "test -f added.txt && grep -q browser README.md")
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	err := do(ctx, signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.Click(css(`button#edit`)),
		showsText(`#changes h2`, "Changes"),
		chromedp.WaitReady(css(`#session[data-started]`)), // session.js listens
		chromedp.Click(css(`#panel-tab-command`)),
		typeInto(`input[name=command]`, "echo from the browser >> README.md; echo '// more' >> src/main.go; echo new > added.txt"),
		chromedp.Click(css(`form.command button`)),
		shows(`.command-result`),
		chromedp.Click(css(`#panel-tab-changes`)),
		shows(`#changes li.added[data-path="added.txt"]`),
		shows(`#changes li.modified[data-path="README.md"]`),
		shows(`#changes li.modified[data-path="src/main.go"]`),
		typeInto(`#submit-message`, "Three files from the browser"),
		chromedp.Click(css(`#submit`)),
		shows(`#change-status`),
		showsText(`#change-status #status`, "verified"),
		shows(`#change-status button#release`),
	)
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#change-status")?.innerText ?? "none"`))
		t.Fatalf("submit and verify: %v; the page has %s; status panel %q; the change %+v", err, pageState(ctx), status, owner.change(id, 1))
	}
	heading, _ := chromedp.Run(ctx, chromedp.Text(css(`h1`)))
	if !strings.Contains(heading, "Three files from the browser") {
		t.Fatalf("the change page's heading %q", heading)
	}
	if err := do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	screenshot(ctx, t, "change")
	err = do(ctx,
		chromedp.Click(css(`#change-status button#release`)),
		showsText(`#change-status #status`, "released"),
		showsText(`#change-status .timeline`, "owner released Change #1"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		shows(`a[data-path="added.txt"]`),
	)
	if err != nil {
		t.Fatalf("release: %v; the page has %s", err, pageState(ctx))
	}
}

// The pages' one reader of output events (app.js's atelierStream, which
// the terminal, watch and command pages share), run in the browser: a
// text event is a JSON string and nothing else; an out event is base64
// and nothing else; a character split across out events waits for its
// last bytes, which finish it whole.
func TestBrowserReadsOutputEvents(t *testing.T) {
	h := newHarness(t)
	ctx := browser(t)
	if err := do(ctx, chromedp.Navigate(h.srv.URL+"/login"), shows(`form.stack`)); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const s = atelierStream;
		const euro = [0xe2, 0x82, 0xac];
		const first = s.bytes(btoa(String.fromCharCode(0x61, euro[0], euro[1])));
		const whole = s.wholeLength(first);
		const rest = s.joined(first.slice(whole), s.bytes(btoa(String.fromCharCode(euro[2], 0x62))));
		return JSON.stringify({
			text: [s.text('"caf\u00e9\\r"'), s.text("caf"), s.text("1"), s.text('{"a":1}')],
			bytes: [Array.from(s.bytes("/w==")), s.bytes("not base64!")],
			split: [whole, new TextDecoder().decode(first.subarray(0, whole)), new TextDecoder().decode(rest), s.wholeLength(rest)],
			ascii: s.wholeLength(new Uint8Array([0x61, 0x62])),
			stray: s.wholeLength(new Uint8Array([0x61, 0x80])),
		});
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	var read struct {
		Text  []*string
		Bytes []any
		Split []any
		Ascii int
		Stray int
	}
	if err := json.Unmarshal([]byte(got), &read); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if len(read.Text) != 4 || read.Text[0] == nil || *read.Text[0] != "café\r" || read.Text[1] != nil || read.Text[2] != nil || read.Text[3] != nil {
		t.Errorf("text events read %s, want the string and three nulls", got)
	}
	if fmt.Sprint(read.Bytes) != "[[255] <nil>]" {
		t.Errorf("out events read %v, want [255] and null", read.Bytes)
	}
	if fmt.Sprint(read.Split) != "[1 a €b 4]" {
		t.Errorf("a character split across out events: %v, want 1 byte shown, then the character whole", read.Split)
	}
	if read.Ascii != 2 || read.Stray != 2 {
		t.Errorf("whole lengths of ASCII %d and of a stray continuation byte %d, want 2 and 2", read.Ascii, read.Stray)
	}
}
