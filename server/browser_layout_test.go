package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// overlap says whether two drawn boxes share any area.
func (b box) overlap(o box) bool {
	return !b.empty() && !o.empty() && b.Left < o.Right-0.5 && o.Left < b.Right-0.5 && b.Top < o.Bottom-0.5 && o.Top < b.Bottom-0.5
}

// hover moves the mouse to the middle of the element sel matches.
func (p page) hover(sel string) {
	p.t.Helper()
	b := p.boxOf(sel)
	if b.empty() {
		p.t.Fatalf("%s is not drawn", sel)
	}
	p.step("hovering "+sel, chromedp.MouseEvent(chromedp.MouseMoved, (b.Left+b.Right)/2, (b.Top+b.Bottom)/2))
}

// The workbench as a person first sees it, in a window maximized on a
// 1920 × 1080 screen: one hint in the empty editor area, a Save that looks
// as disabled as it is (light and dark), New file saying which folder it
// makes the file in, a tree row's actions beside its name rather than
// over it, and a terminal of at least 20 rows (15 in a window of 1280 ×
// 800).
func TestBrowserWorkbenchFirstLook(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	owner := h.user("owner", false)
	id := owner.createProject("first-look")
	const longFile = "cmd/tool/a-file-whose-name-is-longer-than-the-tree.go"
	const longFolder = "a-folder-whose-name-is-longer-than-the-tree"
	if res := owner.upload(id, "base.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: "# First look\n"},
		{name: longFile, body: "package main\n"},
		{name: longFolder + "/inside.txt", body: "inside\n"},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	_, base := owner.session(id)
	p := page{t: t, ctx: browser(t)}
	p.step("the workbench",
		chromedp.EmulateViewport(1920, 960),
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base),
		chromedp.WaitReady(chromedp.CSS(`#session[data-started]`)),
		shows(`#session-tree summary[data-path="cmd"]`),
	)

	// One hint, not two that say nearly the same.
	if hints := strings.Count(p.eval(`document.querySelector(".wb-editors").innerText`), "Choose a file"); hints != 1 {
		t.Fatalf("the empty editor area says %q: %d hints", p.eval(`document.querySelector(".wb-editors").innerText`), hints)
	}

	// Save with nothing to save looks disabled, in both schemes.
	const saveLook = `(() => { const s = getComputedStyle(document.querySelector("#save")); return document.querySelector("#save").disabled + " " + s.opacity + " " + s.cursor; })()`
	for _, s := range []string{"light", "dark"} {
		p.step(s, scheme(s))
		look := strings.Fields(p.eval(saveLook))
		if opacity, _ := strconv.ParseFloat(look[1], 64); look[0] != "true" || opacity > 0.6 || look[2] != "not-allowed" {
			t.Fatalf("%s: the disabled Save looks like %v (disabled, opacity, cursor)", s, look)
		}
	}
	p.step("light again", scheme("light"))
	p.eval(`window.AtelierWorkbench.open("README.md").then(() => "")`)
	if look := strings.Fields(p.eval(saveLook)); look[0] != "false" || look[1] != "1" {
		t.Fatalf("with a file open Save looks like %v", look)
	}

	// New file says where the file goes: the folder of the selected item.
	p.step("cmd/tool listed",
		untilPage(`document.querySelector('#session-tree summary[data-path="cmd"]').click(), true`),
		shows(`#session-tree summary[data-path="cmd/tool"]`),
		untilPage(`document.querySelector('#session-tree summary[data-path="cmd/tool"]').click(), true`),
		shows(`#session-tree a[data-path=`+jsString(longFile)+`]`),
	)
	// A click on the file selects it in the tree (and opens it).
	link := p.boxOf(`#session-tree a[data-path=` + jsString(longFile) + `]`)
	p.step("the file selected", chromedp.MouseClickXY(link.Left+24, (link.Top+link.Bottom)/2),
		untilPage(currentTabPath+` === `+jsString(longFile)))
	p.eval(`document.querySelector('#session-tree [data-act="new-file"]').click(); ""`)
	p.step("the new file's row", shows(`#session-tree li.new-item .inline-edit input`))
	if where := p.eval(`document.querySelector("#session-tree li.new-item .inline-where")?.innerText ?? ""`); !strings.Contains(where, "cmd/tool/") || p.boxOf(`#session-tree li.new-item .inline-where`).empty() {
		t.Fatalf("New file shows %q where the file goes, want cmd/tool/", where)
	}
	p.step("no new file", chromedp.KeyEvent("\x1b"), untilPage(`!document.querySelector("#session-tree li.new-item")`))

	// A row's actions show beside its name, never over it.
	for _, row := range []struct{ item, actions string }{
		{`#session-tree a[data-path=` + jsString(longFile) + `]`, `#session-tree li[data-path=` + jsString(longFile) + `] > .row-actions`},
		{`#session-tree summary[data-path=` + jsString(longFolder) + `]`, `#session-tree li[data-path=` + jsString(longFolder) + `] > .row-actions`},
	} {
		item, actions := row.item, row.actions
		p.hover(item)
		p.step("the actions of "+item, shows(actions))
		name, buttons := p.boxOf(item), p.boxOf(actions)
		if name.overlap(buttons) || name.Right-name.Left < 60 {
			t.Fatalf("hovering %s: its name %+v and its actions %+v overlap, or the name is hidden", item, name, buttons)
		}
	}

	// A terminal, at the panel's first size, has room.
	p.step("a terminal", chromedp.Click(chromedp.CSS(`#panel-tab-terminals`)), chromedp.Click(chromedp.CSS(`#new-terminal`)))
	const rows = `(document.querySelector(".terminal-pane:not([hidden])")?.shadowRoot?.querySelectorAll(".xterm-rows > div").length ?? 0)`
	p.until("a prompt", `(document.querySelector(".terminal-pane:not([hidden])")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "").includes("$")`)
	for _, w := range []struct{ width, height, rows int64 }{{1920, 960, 20}, {1280, 800, 15}} {
		p.step("the window's size", chromedp.EmulateViewport(w.width, w.height))
		want := `(` + rows + ` >= ` + strconv.FormatInt(w.rows, 10) + `)`
		if err := do(p.ctx, untilPage(want)); err != nil {
			t.Fatalf("the first terminal has %s rows in a window of %d × %d, want %d", p.eval(`String(`+rows+`)`), w.width, w.height, w.rows)
		}
	}
}

// The pages around the workbench fit the window: a long file on the Code
// page scrolls in one place (the page itself does not scroll around it),
// in light and dark; the dashboard uses a wide window and its cap fields
// show their whole placeholder; a Change's byline, under a long title in
// a narrow window, still reads in order.
func TestBrowserPagesFitTheWindow(t *testing.T) {
	h := newHarness(t)
	owner := h.user("owner", false)
	h.user("root", true)
	id := owner.createProject("fit")
	var long strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&long, "// line %d %s\n", i, strings.Repeat("wide ", i%40))
	}
	if res := owner.upload(id, "base.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: "# Fit\n"},
		{name: "long.go", body: "package main\n\n" + long.String()},
	}), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	p := page{t: t, ctx: browser(t)}

	// Every element of the viewer that scrolls up and down: there is one.
	const scrollers = `JSON.stringify({page: document.scrollingElement.scrollHeight > innerHeight + 1,
		inside: [document.querySelector("#viewer"), ...document.querySelectorAll("#viewer *")].filter((e) =>
			/auto|scroll/.test(getComputedStyle(e).overflowY) && e.scrollHeight > e.clientHeight + 1).map((e) => e.id || e.className)})`
	p.step("signing in", chromedp.EmulateViewport(1280, 720), signIn(h, "owner", "password-owner"))
	for _, s := range []string{"light", "dark"} {
		p.step("the Code page, "+s,
			scheme(s),
			chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code?path=long.go"),
			shows(`#viewer .chroma`),
		)
		var got struct {
			Page   bool
			Inside []string
		}
		if err := json.Unmarshal([]byte(p.eval(scrollers)), &got); err != nil {
			t.Fatal(err)
		}
		if got.Page || len(got.Inside) != 1 {
			t.Fatalf("%s: a long file scrolls the page (%v) and %q inside the viewer, want one scroller", s, got.Page, got.Inside)
		}
	}

	// A Change with a long title, in a narrow window.
	title := "Rename the session's explorer actions and keep every open folder and tab of the workbench across reloads"
	res := owner.get("/projects/"+itoa(id)+"/code", jsonAccept)
	head := decode[struct {
		Head struct{ Commit string } `json:"head"`
	}](t, res).Head.Commit
	res = owner.post("/projects/"+itoa(id)+"/code/edit", url.Values{"path": {"README.md"}, "content": {"# Fit, changed\n"},
		"base": {head}, "message": {title}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("a Change: %d %s", res.StatusCode, readBody(res))
	}
	cid := decode[changeJSON](t, res).ChangeID
	for _, width := range []int64{1280, 900, 700} {
		p.step("the Change page", chromedp.EmulateViewport(width, 800),
			chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/changes/"+itoa(cid)), shows(`#change h1`))
		// Each word of the byline comes after the one before it: further
		// right on the same line, or on a line below.
		order := p.eval(`(() => {
			const el = document.querySelector("#change .heading > :not(h1)");
			const words = [];
			const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
			for (let n = walk.nextNode(); n; n = walk.nextNode()) {
				for (const m of n.data.matchAll(/\S+/g)) {
					const r = document.createRange();
					r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
					const b = r.getClientRects()[0];
					if (b) words.push({w: m[0], mid: (b.top + b.bottom) / 2, left: b.left, right: b.right, h: b.height});
				}
			}
			const bad = [];
			for (let i = 1; i < words.length; i++) {
				const a = words[i - 1], b = words[i];
				const sameLine = Math.abs(a.mid - b.mid) <= 0.3 * Math.min(a.h, b.h);
				if (sameLine ? b.left < a.right - 1 : b.mid < a.mid) bad.push(a.w + " then " + b.w);
			}
			return words.length < 6 ? "only " + words.map((w) => w.w).join(" ") : bad.join("; ");
		})()`)
		if order != "" {
			t.Fatalf("at %d px the byline reads out of order: %s", width, order)
		}
	}

	// The dashboard on a wide window.
	p.step("the dashboard",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Click(chromedp.CSS(`.signout button`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=username]`)),
		signIn(h, "root", "password-root"),
		chromedp.Navigate(h.srv.URL+"/admin"),
		shows(`#meter-`+itoa(id)+` form.cap input[name=capSeconds]`),
	)
	if b := p.boxOf("#dashboard"); b.Right-b.Left < 1300 {
		t.Fatalf("the dashboard is %.0f px wide in a window of 1400", b.Right-b.Left)
	}
	cut := p.eval(`(() => { const c = document.createElement("canvas").getContext("2d");
		return [...document.querySelectorAll("#dashboard form.cap input[name=capSeconds]")].filter((i) => {
			const s = getComputedStyle(i); c.font = s.font;
			const room = i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
			return c.measureText(i.placeholder).width > room;
		}).map((i) => i.placeholder).join(", "); })()`)
	if cut != "" {
		t.Fatalf("cap fields cut their placeholder: %s", cut)
	}
}
