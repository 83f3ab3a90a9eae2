package server

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// box is an element's rectangle on the page.
type box struct{ Left, Top, Right, Bottom float64 }

// boxOf measures the first element sel matches; a missing or undrawn one
// is an empty box.
func (p page) boxOf(sel string) box {
	p.t.Helper()
	var b box
	raw := p.eval(`(() => { const e = document.querySelector(` + jsString(sel) + `); const r = e && e.getClientRects().length ? e.getBoundingClientRect() : null;
		return JSON.stringify(r ? {Left: r.left, Top: r.top, Right: r.right, Bottom: r.bottom} : {}); })()`)
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		p.t.Fatal(err)
	}
	return b
}

func (b box) empty() bool { return b.Right <= b.Left || b.Bottom <= b.Top }

// inside says whether b lies within o.
func (b box) inside(o box) bool {
	return b.Left >= o.Left-0.5 && b.Top >= o.Top-0.5 && b.Right <= o.Right+0.5 && b.Bottom <= o.Bottom+0.5
}

// scheme makes the page follow the system's light or dark setting.
func scheme(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: name}}})
		return err
	})
}

// On the Code page an owner presses Edit this file and lands in their
// workbench with that file open and the focus in its editor; they change
// and save it, and in the Changes panel its diff opens in the editor area
// (the editor making way for it, the panel keeping to itself), in light
// and in dark; Back, Escape and the file's tab each lead back to the
// editor, and the diff's Edit this file to the file's tab.
func TestBrowserEditThisFileAndItsDiff(t *testing.T) {
	h := newHarness(t)
	_, id := editable(t, h)
	p := page{t: t, ctx: browser(t)}
	p.step("the Code page at src/main.go",
		chromedp.EmulateViewport(1280, 800),
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code?path="+url.QueryEscape("src/main.go")),
		shows(`#viewer form.edit-file button`),
	)
	p.step("Edit this file",
		chromedp.Click(chromedp.CSS(`#viewer form.edit-file button`)),
		chromedp.WaitReady(chromedp.CSS(`#session[data-started]`)),
	)
	p.until("main.go open, the focus in its editor", currentTabPath+` === "src/main.go" && document.activeElement?.id === "editor" && `+shownText+`.includes("package main")`)
	if u, _ := url.Parse(p.eval(`location.href`)); !strings.Contains(u.Path, "/sessions/edit_") || u.Query().Get("path") != "src/main.go" {
		t.Fatalf("Edit this file went to %s", u)
	}
	p.step("an edit, saved",
		chromedp.KeyEvent("// from the workbench\n"),
		chromedp.KeyEvent("s", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
	)
	p.until("saved", `document.querySelector('#editor-tabs .editor-tab[data-path="src/main.go"]').dataset.dirty === "false"`)

	openDiff := func() {
		t.Helper()
		p.step("the Changes panel", chromedp.Click(chromedp.CSS(`#panel-tab-changes`)), shows(`#changes li.modified[data-path="src/main.go"] a`))
		p.eval(`document.querySelector('#changes li.modified[data-path="src/main.go"] a').click(); ""`)
		p.until("the diff", `!!document.querySelector("#diff-view:not([hidden]) #diff pre.unified .add")`)
		area, diff := p.boxOf(".wb-editors"), p.boxOf("#diff-view")
		if diff.empty() || !diff.inside(area) || (diff.Bottom-diff.Top) < 0.8*(area.Bottom-area.Top-60) {
			t.Fatalf("the diff %+v is not the editor area %+v", diff, area)
		}
		if !p.boxOf("#editors").empty() {
			t.Fatal("the editor stays drawn beside the diff")
		}
		if p.eval(`String(!!document.querySelector("#panel #diff, #panel pre.unified"))`) != "false" {
			t.Fatal("the diff is in the bottom panel")
		}
		if added := p.eval(`document.querySelector("#diff pre.unified .add").textContent`); !strings.Contains(added, "from the workbench") {
			t.Fatalf("the diff's added line is %q", added)
		}
	}
	backInEditor := func(how string) {
		t.Helper()
		p.until(how+" leads back to the editor", `document.querySelector("#diff-view").hidden && `+currentTabPath+` === "src/main.go" && `+shownText+`.includes("from the workbench")`)
		if p.boxOf("#editor").empty() {
			t.Fatalf("after %s the editor is not drawn", how)
		}
	}

	colours := map[string]string{}
	for _, s := range []string{"light", "dark"} {
		p.step(s, scheme(s))
		openDiff()
		colours[s] = p.eval(`getComputedStyle(document.querySelector("#diff pre.unified .add")).backgroundColor + " " + getComputedStyle(document.querySelector("#diff-view")).backgroundColor`)
		p.eval(`document.querySelector("#diff-back").click(); ""`)
		backInEditor("Back")
	}
	if colours["light"] == colours["dark"] {
		t.Fatalf("the diff looks the same in light and dark: %s", colours["light"])
	}

	openDiff()
	p.step("Escape", chromedp.KeyEvent("\x1b"))
	backInEditor("Escape")

	openDiff()
	p.eval(`document.querySelector('#editor-tabs .editor-tab[data-path="src/main.go"] .editor-tab-title').click(); ""`)
	backInEditor("the file's tab")

	// Edit this file from the diff opens a tab not open yet.
	p.eval(`document.querySelector('#editor-tabs .editor-tab[data-path="src/main.go"] .editor-tab-close').click(); ""`)
	p.until("no tab", `!document.querySelector("#editor-tabs .editor-tab")`)
	openDiff()
	p.eval(`document.querySelector("#diff-edit").click(); ""`)
	backInEditor("the diff's Edit this file")
}
