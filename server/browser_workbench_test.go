package server

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"atelier/testrig/wait"
)

// A person works in the session's workbench without scrolling the page:
// three files open as tabs, two edited show their marks, Ctrl+S saves the
// shown one, a dirty tab asks inline before it closes, quick open finds a
// file by a fuzzy query, a command runs with Ctrl+Enter and a long one is
// cancelled while its time counts up, and dragging the panel's divider
// gives the shell more rows (stty size follows), remembered on reload.
func TestBrowserWorkbench(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	ctrl := chromedp.KeyModifiers(chromedp.ModifierCtrl)
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		if !wait.Until(wait.Span(within), ok) {
			t.Fatalf("waited %v for %s; the page has %s", wait.Span(within).Duration(), what, pageState(ctx))
		}
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v; the page has %s", what, err, pageState(ctx))
		}
	}
	const shown = `document.querySelector("#editor").shadowRoot.querySelector(".cm-content")`
	typeInEditor := func(text string) {
		t.Helper()
		eval(`(` + shown + `).focus(); ""`)
		step("typing", chromedp.KeyEvent(kb.End), chromedp.KeyEvent(text))
	}
	dirtyTabs := func() string {
		return eval(`Array.from(document.querySelectorAll('.editor-tab[data-dirty="true"]')).map((e) => e.dataset.path).sort().join(" ")`)
	}

	step("opening the session",
		chromedp.EmulateViewport(1280, 800),
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base),
		chromedp.WaitReady(css(`#session[data-started]`)),
		shows(`#session-tree a.open-file[data-path="README.md"]`),
	)
	// The workbench fills the window; the page itself never scrolls.
	if got := eval(`String(document.scrollingElement.scrollHeight <= innerHeight && document.scrollingElement.scrollWidth <= innerWidth)`); got != "true" {
		t.Fatalf("the page scrolls: %s", eval(`document.scrollingElement.scrollHeight + "x" + document.scrollingElement.scrollWidth`))
	}

	// Three files as tabs: from the tree, from quick open, from the
	// explorer's interface.
	eval(`document.querySelector('#session-tree a.open-file[data-path="README.md"]').click(); ""`)
	step("quick open",
		shows(`.editor-tab[data-path="README.md"]`),
		chromedp.KeyEvent("p", ctrl),
		shows(`#finder #find-query`),
		typeInto(`#find-query`, "smain"),
		shows(`#find-results [aria-selected="true"] a[data-path="src/main.go"]`),
		chromedp.KeyEvent(kb.Enter),
		shows(`.editor-tab.current[data-path="src/main.go"]`),
	)
	if open := eval(`String(document.querySelector("#finder").open)`); open != "false" {
		t.Fatal("quick open stayed open after Enter")
	}
	eval(`window.AtelierWorkbench.open("src/old.txt").then(() => "")`)
	step("three tabs", shows(`.editor-tab.current[data-path="src/old.txt"]`))
	if n := eval(`String(document.querySelectorAll(".editor-tab").length)`); n != "3" {
		t.Fatalf("%s tabs", n)
	}
	waitFor("the file in the shown editor", 10*time.Second, func() bool { return strings.Contains(eval(`(`+shown+`).innerText`), "old") })

	// Edit two of them: both carry the mark.
	typeInEditor(" edited-old")
	eval(`document.querySelector('.editor-tab[data-path="src/main.go"] .editor-tab-title').click(); ""`)
	waitFor("main.go shown", 5*time.Second, func() bool { return strings.Contains(eval(`(`+shown+`).innerText`), "package main") })
	typeInEditor("// edited-main")
	waitFor("two dirty marks", 5*time.Second, func() bool { return dirtyTabs() == "src/main.go src/old.txt" })
	if eval(`String(window.AtelierWorkbench.isDirty("src/main.go") && !window.AtelierWorkbench.isDirty("README.md"))`) != "true" {
		t.Fatal("isDirty does not follow the tabs")
	}

	// Ctrl+S saves the shown tab only.
	step("Ctrl+S", chromedp.KeyEvent("s", ctrl))
	waitFor("main.go saved", 10*time.Second, func() bool { return dirtyTabs() == "src/old.txt" })
	if got, _, _ := owner.read(base, "src/main.go"); !strings.Contains(got, "// edited-main") {
		t.Fatalf("main.go on the server: %q", got)
	}
	if got, _, _ := owner.read(base, "src/old.txt"); strings.Contains(got, "edited-old") {
		t.Fatalf("Ctrl+S saved a tab that was not shown: %q", got)
	}

	// Closing the dirty tab asks inline; Keep keeps it, Discard closes it.
	eval(`document.querySelector('.editor-tab[data-path="src/old.txt"] .editor-tab-close').click(); ""`)
	step("asked before closing", shows(`.editor-tab[data-path="src/old.txt"] .tab-confirm`))
	eval(`document.querySelector('.editor-tab[data-path="src/old.txt"] .tab-keep').click(); ""`)
	if dirtyTabs() != "src/old.txt" {
		t.Fatal("Keep lost the tab")
	}
	eval(`document.querySelector('.editor-tab[data-path="src/old.txt"] .editor-tab-close').click(); ""`)
	eval(`document.querySelector('.editor-tab[data-path="src/old.txt"] .tab-discard').click(); ""`)
	if n := eval(`String(document.querySelectorAll(".editor-tab").length)`); n != "2" || dirtyTabs() != "" {
		t.Fatalf("after discarding: %s tabs, dirty %q", n, dirtyTabs())
	}
	if got, _, _ := owner.read(base, "src/old.txt"); got != "old\n" {
		t.Fatalf("a discarded tab wrote its text: %q", got)
	}

	// "?" lists the shortcuts; Escape closes the list.
	eval(`document.activeElement.blur(); ""`)
	step("shortcuts", chromedp.KeyEvent("?"), shows(`#shortcuts[open]`), chromedp.KeyEvent(kb.Escape))
	waitFor("the shortcuts closed", 5*time.Second, func() bool { return eval(`String(document.querySelector("#shortcuts").open)`) == "false" })

	// Ctrl+Enter runs the command box; the result replaces the last one.
	step("a command",
		chromedp.Click(css(`#panel-tab-command`)),
		typeInto(`#command-form input[name=command]`, "echo hi-from-the-workbench"),
		chromedp.KeyEvent("\r", ctrl),
		showsText(`#command-result .command-result pre.stdout`, "hi-from-the-workbench"),
		showsText(`#command-state`, "Finished in"),
	)
	eval(`document.querySelector("#command-form input[name=command]").value = ""; ""`)
	began := time.Now()
	step("a long command",
		typeInto(`#command-form input[name=command]`, "sleep 30"),
		chromedp.Click(css(`#command-run`)),
		shows(`#command-cancel`),
		untilPage(`document.querySelector("#command-state").dataset.state === "running"`),
	)
	if eval(`document.querySelector("#command-result").textContent`) != "" && !strings.Contains(eval(`document.querySelector("#command-result").textContent`), "hi-from-the-workbench") {
		t.Fatal("the old result changed before the new one came")
	}
	// The elapsed time counts up while it runs.
	elapsed := func() float64 {
		m := regexp.MustCompile(`([0-9]+\.[0-9]) s`).FindStringSubmatch(eval(`document.querySelector("#command-state").textContent`))
		if m == nil {
			return -1
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		return f
	}
	waitFor("the elapsed time passing a second", 10*time.Second, func() bool { return elapsed() >= 1 })
	step("cancel",
		chromedp.Click(css(`#command-cancel`)),
		shows(`#command-result .command-result[data-canceled="true"]`),
		showsText(`#command-state`, "Cancelled after"),
	)
	if took := time.Since(began); took > 20*time.Second {
		t.Fatalf("the cancelled command took %s", took)
	}
	if strings.Contains(eval(`document.querySelector("#command-result").textContent`), "hi-from-the-workbench") {
		t.Fatal("the old result is still shown beside the new one")
	}

	// Ctrl+` shows the terminals, hides the panel, and brings it back.
	step("Ctrl+` shows the terminals", chromedp.KeyEvent("`", ctrl), shows(`#terminals #new-terminal`))
	step("Ctrl+` hides", chromedp.KeyEvent("`", ctrl), untilPage(`document.documentElement.classList.contains("wb-panel-hidden")`))
	step("Ctrl+` shows the panel again", chromedp.KeyEvent("`", ctrl),
		untilPage(`!document.documentElement.classList.contains("wb-panel-hidden")`),
		shows(`#terminals #new-terminal`),
		shows(`#terminal-hint`),
	)

	// A terminal, and its size as the shell sees it.
	step("a terminal", chromedp.Click(css(`#new-terminal`)))
	const rows = `(document.querySelector(".terminal-pane:not([hidden])")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "")`
	waitFor("a prompt", 15*time.Second, func() bool { return strings.Contains(eval(rows), "$") })

	sizeRe := regexp.MustCompile(`^[ \x{a0}]*\n(\d+) (\d+)[ \x{a0}]*\n`)
	sttySize := func(marker string) (int, int) {
		t.Helper()
		eval(`document.querySelector(".terminal-pane:not([hidden])").shadowRoot.querySelector(".xterm-helper-textarea").focus(); ""`)
		insert := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: "clear; echo " + marker + "; stty size"})
			return err
		})
		step("stty size", insert, chromedp.KeyEvent(kb.Enter))
		var r, c int
		waitFor("stty size after "+marker, 15*time.Second, func() bool {
			screen := eval(rows)
			at := strings.LastIndex(screen, marker)
			if at < 0 {
				return false
			}
			m := sizeRe.FindStringSubmatch(screen[at+len(marker):])
			if m == nil {
				return false
			}
			r, _ = strconv.Atoi(m[1])
			c, _ = strconv.Atoi(m[2])
			return true
		})
		return r, c
	}
	rowsBefore, colsBefore := sttySize("before-drag")

	// Drag the divider above the panel up by 160 px.
	var split struct{ X, Y float64 }
	if err := json.Unmarshal([]byte(eval(`(() => { const r = document.querySelector("#split-panel").getBoundingClientRect(); return JSON.stringify({X: r.x + r.width / 2, Y: r.y + r.height / 2}) })()`)), &split); err != nil {
		t.Fatal(err)
	}
	held := func(p *input.DispatchMouseEventParams) { p.Button = input.MouseButtonLeft; p.Buttons = 1 }
	moves := []chromedp.Action[chromedp.Void]{chromedp.MouseEvent(chromedp.MousePressed, split.X, split.Y, held, func(p *input.DispatchMouseEventParams) { p.ClickCount = 1 })}
	for dy := 20.0; dy <= 160; dy += 20 {
		moves = append(moves, chromedp.MouseEvent(chromedp.MouseMoved, split.X, split.Y-dy, held))
	}
	moves = append(moves, chromedp.MouseEvent(chromedp.MouseReleased, split.X, split.Y-160, held, func(p *input.DispatchMouseEventParams) { p.ClickCount = 1 }))
	panelBefore := eval(`String(Math.round(document.querySelector("#panel").getBoundingClientRect().height))`)
	step("dragging the divider", moves...)
	panelAfter := eval(`String(Math.round(document.querySelector("#panel").getBoundingClientRect().height))`)
	before, _ := strconv.Atoi(panelBefore)
	if after, _ := strconv.Atoi(panelAfter); after < before+120 {
		t.Fatalf("the panel is %s px high after dragging 160 px up from %s", panelAfter, panelBefore)
	}
	// The shell hears of the new size: more rows, the same columns.
	var rowsAfter, colsAfter int
	waitFor("the shell's new size", 15*time.Second, func() bool {
		rowsAfter, colsAfter = sttySize(fmt.Sprintf("after-drag-%d", time.Now().UnixNano()))
		return rowsAfter > rowsBefore
	})
	if rowsAfter < rowsBefore+5 || colsAfter != colsBefore {
		t.Fatalf("stty size %d %d before, %d %d after the drag", rowsBefore, colsBefore, rowsAfter, colsAfter)
	}

	// The size is this browser's: a reload keeps it.
	step("reload", chromedp.Reload(), chromedp.WaitReady(css(`#session[data-started]`)))
	if again := eval(`String(Math.round(document.querySelector("#panel").getBoundingClientRect().height))`); again != panelAfter {
		t.Fatalf("after a reload the panel is %s px high, not %s", again, panelAfter)
	}
	// Nothing moved while the panes loaded: the tree, the changes, the
	// history and the terminal's scrollback came into boxes of their size.
	step("the panes loaded",
		showsText(`#changes h2`, "Changes"),
		untilPage(`document.querySelector("#command-history").textContent.includes("sleep 30")`),
		untilPage(rows+`.includes("$")`),
	)
	shift := eval(`new Promise((resolve) => {
		let total = 0;
		new PerformanceObserver((list) => { for (const e of list.getEntries()) if (!e.hadRecentInput) total += e.value; })
			.observe({type: "layout-shift", buffered: true});
		setTimeout(() => resolve(String(total)), 300);
	})`)
	if f, _ := strconv.ParseFloat(shift, 64); f > 0.01 {
		t.Fatalf("the page shifted while its panes loaded: layout shift %s", shift)
	}
	t.Logf("layout shift while loading: %s", shift)

	// Light and dark, the editor and the terminal included.
	colours := map[string]string{}
	for _, scheme := range []string{"light", "dark"} {
		media := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		})
		step(scheme, media,
			chromedp.Navigate(h.srv.URL+base+"?path=src%2Fmain.go"),
			chromedp.WaitReady(css(`#session[data-started]`)),
			shows(`.editor-tab.current[data-path="src/main.go"]`),
			showsText(`#changes h2`, "Changes"),
			untilPage(`(document.querySelector(".terminal-pane:not([hidden])")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "").includes("$")`),
		)
		// Two tabs, the second one shown, for the picture.
		eval(`window.AtelierWorkbench.open("README.md").then(() => window.AtelierWorkbench.open("src/main.go")).then(() => "")`)
		colours[scheme] = eval(`[getComputedStyle(document.querySelector("#editor").shadowRoot.querySelector(".cm-editor")).backgroundColor,
			getComputedStyle(document.querySelector("#editor").shadowRoot.querySelector(".cm-gutters")).backgroundColor,
			getComputedStyle(document.querySelector(".terminal-pane:not([hidden])")).backgroundColor].join("|")`)
		screenshot(ctx, t, "workbench-"+scheme)
	}
	light, dark := strings.Split(colours["light"], "|"), strings.Split(colours["dark"], "|")
	for i, what := range []string{"editor", "gutter", "terminal"} {
		if light[i] == dark[i] {
			t.Fatalf("the dark scheme leaves the %s's background %s", what, light[i])
		}
	}
}
