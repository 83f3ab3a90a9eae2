package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// browsable makes a project with a few nested files and a member "reader";
// it returns the owner and the project's id.
func browsable(t *testing.T, h *harness) (*client, int64) {
	t.Helper()
	owner := h.user("owner", false)
	id := owner.createProject("browse")
	res := owner.upload(id, "src.tar.gz", tarGz(t, []entry{
		{name: "cmd/tool/main.go", body: "package main\n\nimport \"fmt\"\n\n// main greets.\nfunc main() { fmt.Println(\"hi\") }\n"},
		{name: "cmd/tool/flags.go", body: "package main\n\nvar verbose = false\n"},
		{name: "internal/store/store.go", body: "package store\n\ntype Store struct{}\n"},
		{name: "README.md", body: "# Browse\n"},
	}), jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := h.app.Auth.CreateUser(t.Context(), "reader", "reader-password", false); err != nil {
		t.Fatal(err)
	}
	owner.addMember(id, "reader", "member")
	return owner, id
}

// activePath is the data-path of the focused element.
const activePath = `document.activeElement && document.activeElement.dataset.path`

func focusedOn(path string) chromedp.Action[chromedp.Void] {
	return untilPage(activePath + ` === ` + jsString(path))
}

func jsString(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// Ctrl+P opens the finder; a fuzzy query ranks the file first, Enter opens
// it, and the reloaded page shows it unfolded and marked in the tree. A
// member is told why there is no Edit button.
func TestBrowserQuickOpen(t *testing.T) {
	h := newHarness(t)
	_, id := browsable(t, h)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	err := do(ctx,
		signIn(h, "reader", "reader-password"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		showsText(`#no-edit`, "member"),
		chromedp.WaitVisible(css(`summary[data-path="cmd"]`)),
		chromedp.KeyEvent("p", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
		shows(`dialog#finder[open] #find-query`),
		typeInto(`#find-query`, "tmain"),
		shows(`#find-results [aria-selected="true"] a[data-path="cmd/tool/main.go"]`),
		chromedp.KeyEvent(kb.Enter),
		shows(`#viewer article.file[data-path="cmd/tool/main.go"] .chroma`),
		shows(`a[data-path="cmd/tool/main.go"][aria-current="true"]`),
		showsText(`.crumbs [aria-current="page"]`, "main.go"),
		// "?" lists the shortcuts.
		chromedp.KeyEvent("?"),
		showsText(`dialog#shortcuts[open]`, "Go to a file by name"),
	)
	if err != nil {
		t.Fatalf("quick open: %v; the page has %s", err, pageState(ctx))
	}
}

// With the keyboard alone a person reaches the tree, unfolds folders with
// the right arrow, steps into them and opens a file with Enter.
func TestBrowserTreeKeyboard(t *testing.T) {
	h := newHarness(t)
	_, id := browsable(t, h)
	ctx := browser(t)
	tabIntoTree := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for range 30 {
			if _, err := chromedp.KeyEvent(kb.Tab)(ctx, t); err != nil {
				return err
			}
			in, err := chromedp.Evaluate[bool](`!!document.activeElement.closest('[role="tree"]')`)(ctx, t)
			if err != nil || in {
				return err
			}
		}
		return context.DeadlineExceeded
	})
	err := do(ctx,
		signIn(h, "reader", "reader-password"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.WaitVisible(chromedp.CSS(`summary[data-path="cmd"]`)),
		tabIntoTree,
		focusedOn("cmd"),
		chromedp.KeyEvent(kb.ArrowDown), focusedOn("internal"),
		chromedp.KeyEvent(kb.ArrowUp), focusedOn("cmd"),
		chromedp.KeyEvent(kb.ArrowRight), shows(`summary[data-path="cmd/tool"]`),
		untilPage(`document.querySelector('summary[data-path="cmd"]').getAttribute("aria-expanded") === "true"`),
		chromedp.KeyEvent(kb.ArrowRight), focusedOn("cmd/tool"),
		chromedp.KeyEvent(kb.ArrowRight), shows(`a[data-path="cmd/tool/main.go"]`),
		chromedp.KeyEvent(kb.ArrowRight), focusedOn("cmd/tool/flags.go"),
		chromedp.KeyEvent(kb.ArrowDown), focusedOn("cmd/tool/main.go"),
		chromedp.KeyEvent(kb.Enter),
		shows(`#viewer article.file[data-path="cmd/tool/main.go"] .chroma`),
		chromedp.KeyEvent(kb.ArrowLeft), focusedOn("cmd/tool"),
		chromedp.KeyEvent(kb.ArrowLeft),
		untilPage(`!document.querySelector('summary[data-path="cmd/tool"]').parentElement.open`),
	)
	if err != nil {
		t.Fatalf("keyboard walk: %v; focus on %s", err, pageState(ctx))
	}
}

// A request that fails under the page (a file removed by an import in
// another tab) says why in a toast.
func TestBrowserFailedRequestToast(t *testing.T) {
	h := newHarness(t)
	owner, id := browsable(t, h)
	ctx := browser(t)
	err := do(ctx,
		signIn(h, "reader", "reader-password"),
		chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code"),
		chromedp.WaitVisible(chromedp.CSS(`a[data-path="README.md"]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	res := owner.upload(id, "other.tar.gz", tarGz(t, []entry{{name: "NEW.md", body: "# new\n"}}), jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("second import: %d %s", res.StatusCode, readBody(res))
	}
	err = do(ctx,
		chromedp.Click(chromedp.CSS(`a[data-path="README.md"]`)),
		shows(`#toasts .toast[data-reason="not_found"]`),
		showsText(`#toasts .toast`, "No such file or folder."),
	)
	if err != nil {
		t.Fatalf("no toast: %v", err)
	}
}

// The Code page in the light and the dark scheme, saved for the README.
// Dark is the system's choice, not a switch: the page and the highlighting
// both follow it.
func TestBrowserCodePageThemes(t *testing.T) {
	h := newHarness(t)
	_, id := browsable(t, h)
	ctx := browser(t)
	if err := do(ctx, chromedp.EmulateViewport(1280, 720), signIn(h, "reader", "reader-password")); err != nil {
		t.Fatal(err)
	}
	colours := map[string][2]string{}
	for _, scheme := range []string{"light", "dark"} {
		media := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		})
		err := do(ctx, media,
			chromedp.Navigate(h.srv.URL+"/projects/"+itoa(id)+"/code?path=cmd%2Ftool%2Fmain.go"),
			shows(`#viewer .chroma`),
			shows(`a[data-path="cmd/tool/main.go"][aria-current="true"]`),
		)
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		bg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor + "|" + getComputedStyle(document.querySelector("#viewer .chroma")).backgroundColor`))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(bg, "|", 2)
		colours[scheme] = [2]string{parts[0], parts[1]}
		if scheme == "dark" {
			// Every token is light on the dark background, those the light
			// scheme colours dark included.
			dimmest, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`Math.min(...Array.from(document.querySelectorAll("#viewer .chroma .line span")).map((e) => {
				const [r, g, b] = getComputedStyle(e).color.match(/\d+/g).map(Number);
				return (0.299 * r + 0.587 * g + 0.114 * b) / 255;
			}))`))
			if err != nil || dimmest < 0.35 {
				t.Fatalf("a token is dark on the dark background (brightness %.2f, %v)", dimmest, err)
			}
		}
		screenshot(ctx, t, "code-"+scheme)
	}
	if colours["light"][0] == colours["dark"][0] || colours["light"][1] == colours["dark"][1] {
		t.Fatalf("the dark scheme changes nothing: page and viewer backgrounds %v", colours)
	}
}
