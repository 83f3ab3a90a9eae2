package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// In the workbench, Ctrl+Shift+F opens the panel's search, from inside the
// editor too; the matches of the session's tree come grouped by file with
// their line numbers and the match marked, the session's own edit
// included; a result opens its file in a tab. On the Code page the same
// keys reach its search box.
func TestBrowserSearch(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	if res := owner.put(base, "src/extra.go", []byte("package main\n\n// main is not here\nfunc helper() {}\n"), nil); res.StatusCode != http.StatusNoContent {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}
	ctx := browser(t)
	ctrlShift := chromedp.KeyModifiers(chromedp.ModifierCtrl, chromedp.ModifierShift)
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v; the page has %s", what, err, pageState(ctx))
		}
	}

	step("opening the session",
		chromedp.EmulateViewport(1280, 800),
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base+"?path=README.md"),
		chromedp.WaitReady(chromedp.CSS(`#session[data-started]`)),
		shows(`.editor-tab.current[data-path="README.md"]`),
	)
	// From inside the editor, where CodeMirror has the keys.
	eval(`document.querySelector("#editor").shadowRoot.querySelector(".cm-content").focus(); ""`)
	step("Ctrl+Shift+F",
		chromedp.KeyEvent("f", ctrlShift),
		shows(`#panel-search #search-query`),
		untilPage(`document.activeElement === document.querySelector("#search-query")`),
	)
	if sel := eval(`document.querySelector("#panel-tab-search").getAttribute("aria-selected")`); sel != "true" {
		t.Fatalf("the search tab is not the shown one: %s", sel)
	}
	step("searching",
		chromedp.KeyEvent("main"),
		chromedp.KeyEvent(kb.Enter),
		shows(`#search-results p.search-summary`),
	)
	files := eval(`Array.from(document.querySelectorAll("#search-results h3.search-path a")).map((a) => a.dataset.path).join(" ")`)
	if files != "README.md src/extra.go src/main.go" && files != "src/extra.go src/main.go" {
		t.Fatalf("files with a match: %q", files)
	}
	// src/main.go holds "package main" and "func main() {}": two lines
	// under one heading, each numbered, each match marked.
	lines := eval(`Array.from(document.querySelectorAll('#search-results ol.search-lines[data-path="src/main.go"] li')).map((li) => li.querySelector(".ln").textContent + ":" + li.querySelector("mark").textContent).join(" ")`)
	if lines != "1:main 3:main" {
		t.Fatalf("the lines of src/main.go: %q", lines)
	}
	if got := eval(`document.querySelector('#search-results ol.search-lines[data-path="src/extra.go"] li:nth-child(2) code').textContent`); got != "// main is not here" {
		t.Fatalf("the session's edit: %q", got)
	}
	if n := eval(`String(document.querySelectorAll('#search-results h3.search-path a[data-path="src/main.go"]').length)`); n != "1" {
		t.Fatalf("src/main.go is headed %s times", n)
	}
	screenshot(ctx, t, "search")
	eval(`document.querySelector('#search-results ol.search-lines[data-path="src/extra.go"] a').click(); ""`)
	step("a result opens its file", shows(`.editor-tab.current[data-path="src/extra.go"]`))

	// A second search replaces the first.
	step("searching again",
		chromedp.KeyEvent("f", ctrlShift),
		chromedp.KeyEvent("helper"),
		chromedp.KeyEvent(kb.Enter),
		untilPage(`(() => { const s = document.querySelector("#search-results p.search-summary"); return !!s && s.dataset.matches === "1" })()`),
	)
	if files := eval(`Array.from(document.querySelectorAll("#search-results h3.search-path a")).map((a) => a.dataset.path).join(" ")`); files != "src/extra.go" {
		t.Fatalf("after the second search: %q", files)
	}

	// The Code page: Ctrl+Shift+F reaches its box; the results take the
	// viewer's place and link to the file at the line.
	step("the Code page",
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		shows(`#search-form #search-query`),
		chromedp.KeyEvent("f", ctrlShift),
		untilPage(`document.activeElement === document.querySelector("#search-query")`),
		chromedp.KeyEvent("func"),
		chromedp.KeyEvent(kb.Enter),
		shows(`#viewer p.search-summary`),
	)
	href := eval(`document.querySelector('#viewer ol.search-lines a').getAttribute("href")`)
	if !strings.HasSuffix(href, "/code?path=src%2Fmain.go#L3") {
		t.Fatalf("the Code page's result links to %q", href)
	}
	if mark := eval(`document.querySelector('#viewer ol.search-lines mark').textContent`); mark != "func" {
		t.Fatalf("marked %q", mark)
	}

	// A broken expression is refused with the reason, and the list says
	// the search ended.
	eval(`document.querySelector('#search-form input[name=regex]').checked = true; document.querySelector("#search-query").value = ""; ""`)
	step("a broken expression",
		typeInto(`#search-query`, "a(b"),
		chromedp.KeyEvent(kb.Enter),
		showsText(`.toast`, "not a valid regular expression"),
		showsText(`#viewer .search-progress`, "refused"),
	)
}
