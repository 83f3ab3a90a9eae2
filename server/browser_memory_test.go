package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// page drives one browser tab for a test: every step has a deadline and
// a failure says where the page was.
type page struct {
	t   *testing.T
	ctx context.Context
}

// eval runs expr (awaiting a promise) and answers its value as a string.
func (p page) eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// step runs steps and fails the test, saying what it was doing, if one
// fails or they take longer than 20 s.
func (p page) step(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v; the page has %s", what, err, pageState(p.ctx))
	}
}

// until waits for the JavaScript predicate to hold.
func (p page) until(what, predicate string) {
	p.t.Helper()
	p.step(what, untilPage(predicate))
}

// The shown editor, its text and where its cursor and scroll are; the
// editor lives in a shadow root, so scripts reach it.
const (
	shownEditor     = `document.querySelector("#editor").shadowRoot`
	shownText       = shownEditor + `.querySelector(".cm-content").innerText`
	shownLine       = `(` + shownEditor + `.querySelector(".cm-activeLineGutter")?.textContent ?? "")`
	shownScrollTop  = `String(Math.round(` + shownEditor + `.querySelector(".cm-scroller").scrollTop))`
	currentTabPath  = `(document.querySelector("#editor-tabs .editor-tab.current")?.dataset.path ?? "")`
	openTabsInOrder = `Array.from(document.querySelectorAll("#editor-tabs .editor-tab"), (e) => e.dataset.path).join(" ")`
)

// showTab shows path's tab, with the focus in its editor.
func (p page) showTab(path string) {
	p.t.Helper()
	p.eval(`document.querySelector('#editor-tabs .editor-tab[data-path=` + jsString(path) + `] .editor-tab-title').click(); ""`)
	p.until("the tab of "+path, currentTabPath+` === `+jsString(path)+` && document.activeElement?.id === "editor"`)
}

// A person opens five files, puts the cursor somewhere in each, scrolls a
// long one, shows another, opens folders and the Changes panel; a file is
// deleted meanwhile. After a reload the same tabs are back in the same
// order, each cursor where it was (a mark typed after the reload lands
// there), the long file scrolled as it was, the same tab shown, the same
// folders open and the same panel tab; the deleted file's tab is not, and
// a note says so.
func TestBrowserWorkbenchRemembers(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("remember")
	var long strings.Builder
	for i := 1; i <= 400; i++ {
		fmt.Fprintf(&long, "line %d of the long file\n", i)
	}
	if res := owner.upload(id, "base.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: "# Remember\n\nA project.\n"},
		{name: "src/main.go", body: "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"},
		{name: "src/old.txt", body: "old\n"},
		{name: "docs/long.txt", body: long.String()},
		{name: "cmd/tool/main.go", body: "package main\n\n// tool\nfunc main() {}\n"},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	_, base := owner.session(id)
	p := page{t: t, ctx: browser(t)}
	p.step("opening the session",
		chromedp.EmulateViewport(1280, 800),
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base),
		chromedp.WaitReady(chromedp.CSS(`#session[data-started]`)),
		shows(`#session-tree summary[data-path="docs"]`),
	)
	files := []string{"README.md", "src/main.go", "src/old.txt", "docs/long.txt", "cmd/tool/main.go"}
	for _, f := range files {
		p.eval(`window.AtelierWorkbench.open(` + jsString(f) + `).then(() => "")`)
	}
	if got := p.eval(openTabsInOrder); got != strings.Join(files, " ") {
		t.Fatalf("open tabs %q", got)
	}

	// The cursor at the end of a line of each file: line 1 of README.md,
	// 4 of main.go, 3 of the tool's main.go.
	ctrl := chromedp.KeyModifiers(chromedp.ModifierCtrl)
	cursorAt := func(path string, line int) {
		t.Helper()
		p.showTab(path)
		steps := []chromedp.Action[chromedp.Void]{chromedp.KeyEvent(kb.Home, ctrl)}
		for range line - 1 {
			steps = append(steps, chromedp.KeyEvent(kb.ArrowDown))
		}
		p.step("the cursor in "+path, append(steps, chromedp.KeyEvent(kb.End))...)
		p.until("line "+strconv.Itoa(line)+" of "+path, shownLine+` === "`+strconv.Itoa(line)+`"`)
	}
	cursorAt("README.md", 1)
	cursorAt("cmd/tool/main.go", 3)
	cursorAt("src/main.go", 4)
	// The long file paged down: the cursor and the scroll far from the top.
	p.showTab("docs/long.txt")
	p.step("paging down", chromedp.KeyEvent(kb.PageDown), chromedp.KeyEvent(kb.PageDown), chromedp.KeyEvent(kb.PageDown), chromedp.KeyEvent(kb.End))
	longLine, longTop := p.eval(shownLine), p.eval(shownScrollTop)
	if n, _ := strconv.Atoi(longLine); n < 30 {
		t.Fatalf("after three pages down the cursor is on line %s", longLine)
	}
	if top, _ := strconv.Atoi(longTop); top < 300 {
		t.Fatalf("after three pages down the long file is scrolled %s px", longTop)
	}
	p.showTab("src/main.go")

	// Folders open in the tree, and the Changes panel.
	for _, dir := range []string{"docs", "cmd", "cmd/tool"} {
		p.step(dir+" listed", shows(`#session-tree summary[data-path=`+jsString(dir)+`]`))
		p.eval(`document.querySelector('#session-tree summary[data-path=` + jsString(dir) + `]').click(); ""`)
		p.until(dir+" open", `!!document.querySelector('#session-tree summary[data-path=`+jsString(dir)+`]')?.parentElement.open`)
	}
	p.step("the Changes panel", chromedp.Click(chromedp.CSS(`#panel-tab-changes`)), shows(`#changes h2`))

	// Meanwhile the file of one tab goes (another tab, a command).
	if res := owner.del(base+"/file?path="+url.QueryEscape("src/old.txt"), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("deleting src/old.txt: %d %s", res.StatusCode, readBody(res))
	}

	p.step("reload", chromedp.Reload(), chromedp.WaitReady(chromedp.CSS(`#session[data-started]`)))
	want := "README.md src/main.go docs/long.txt cmd/tool/main.go"
	p.until("the tabs back", openTabsInOrder+` === `+jsString(want))
	p.until("the same tab shown", currentTabPath+` === "src/main.go"`)
	p.until("the note on the deleted file", `[...document.querySelectorAll("#toasts .toast.note[data-reason=tabs_dropped]")].some((e) => e.textContent.includes("src/old.txt no longer exists"))`)
	if got := p.eval(`document.querySelector("#panel-tab-changes").getAttribute("aria-selected") + " " + document.querySelector("#panel-changes").hidden`); got != "true false" {
		t.Fatalf("the Changes panel after the reload: selected, hidden = %s", got)
	}
	for _, dir := range []string{"docs", "cmd", "cmd/tool"} {
		p.until(dir+" open again", `!!document.querySelector('#session-tree summary[data-path=`+jsString(dir)+`]')?.parentElement.open`)
	}
	p.until("the long file listed in its folder", `!!document.querySelector('#session-tree a[data-path="docs/long.txt"]')`)

	// The long file where it was.
	p.showTab("docs/long.txt")
	p.until("the long file's cursor line", shownLine+` === `+jsString(longLine))
	top, _ := strconv.Atoi(p.eval(shownScrollTop))
	if was, _ := strconv.Atoi(longTop); top < was-2 || top > was+2 {
		t.Fatalf("the long file is scrolled %d px after the reload, %d before", top, was)
	}
	// Each cursor where it was: a mark typed now lands at the end of its
	// line.
	for _, c := range []struct {
		path string
		line string
	}{
		{"README.md", "# Remember@"},
		{"src/main.go", "\tprintln(\"hi\")@"},
		{"cmd/tool/main.go", "// tool@"},
		{"docs/long.txt", "line " + longLine + " of the long file@"},
	} {
		p.showTab(c.path)
		p.step("a mark at the cursor of "+c.path, chromedp.KeyEvent("@"))
		p.until("the mark in "+c.path, shownText+`.includes("@")`)
		if lines := strings.Split(p.eval(shownText), "\n"); !slices.Contains(lines, c.line) {
			t.Errorf("after the reload a mark typed in %s lands elsewhere: %q", c.path, lines)
		}
	}
}
