package server

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// watchActivity makes every page the browser opens note what the README
// could make it do: window.ran is what its scripts set, and every script,
// handler or style the page's CSP refused is noted too, since the CSP is
// the second guard and must never be the one that held.
const watchActivity = `
window.refused = [];
document.addEventListener("securitypolicyviolation", (e) => window.refused.push(e.violatedDirective + " " + (e.sample || e.blockedURI)));
`

// A person opens a project whose README tries to run scripts: the README
// shows below the tree, rendered, and nothing in it runs or is refused by
// the CSP; its image loads from the project; its link opens the guide;
// the toggle shows the source, and the rendering again.
func TestBrowserMarkdown(t *testing.T) {
	h := newHarness(t)
	_, id := markdownProject(t, h)
	ctx := browser(t)
	watch := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: watchActivity})
		return err
	})
	code := h.srv.URL + "/projects/" + itoa(id) + "/code"
	err := do(ctx, watch, chromedp.EmulateViewport(1280, 800), signIn(h, "owner", "password-owner"),
		chromedp.Navigate(code),
		shows(`#viewer article.readme .markdown h1`),
		// The image is the project's PNG, decoded.
		untilPage(`(() => { const i = document.querySelector('#viewer .markdown img[alt="a shot"]'); return !!i && i.complete && i.naturalWidth === 3 })()`),
	)
	if err != nil {
		t.Fatalf("the README: %v; the page has %s", err, pageState(ctx))
	}
	// Hover and click what the README offered as handlers and links.
	err = do(ctx,
		untilPage(`(() => { for (const e of document.querySelectorAll("#viewer .markdown *")) { e.dispatchEvent(new MouseEvent("mouseover", {bubbles: true})); } return true })()`),
		untilPage(`(() => { for (const e of document.querySelectorAll("#viewer .markdown a:not([href])")) e.click(); return true })()`),
	)
	if err != nil {
		t.Fatal(err)
	}
	quiet := func(when string) {
		t.Helper()
		state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({ran: window.ran ?? null, refused: window.refused,
			active: document.querySelectorAll("#viewer script, #viewer iframe, #viewer svg, #viewer [style], #viewer [onerror], #viewer [onclick], #viewer [onload], #viewer [onmouseover]").length})`))
		if err != nil {
			t.Fatal(err)
		}
		if state != `{"ran":null,"refused":[],"active":0}` {
			t.Fatalf("%s: %s", when, state)
		}
	}
	quiet("the README")

	err = do(ctx,
		clickWhenThere(`#viewer .markdown a[href*="guide.md"]`),
		showsText(`#viewer article.file .markdown h1`, "The guide"),
		clickWhenThere(`#viewer .markdown-toggle [data-view=source]`),
		showsText(`#viewer article.file .highlight`, "# The guide"),
	)
	if err != nil {
		t.Fatalf("the guide and its source: %v; the page has %s", err, pageState(ctx))
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	u, perr := url.Parse(location)
	if err != nil || perr != nil || u.Query().Get("path") != "docs/guide.md" || u.Query().Get("view") != "source" {
		t.Fatalf("the address %q (%v) does not say the source is shown", location, err)
	}
	// A reload keeps the source; the toggle goes back to the rendering.
	err = do(ctx,
		chromedp.Reload(),
		shows(`#viewer article.file .highlight`),
		clickWhenThere(`#viewer .markdown-toggle [data-view=rendered]`),
		showsText(`#viewer article.file .markdown h1`, "The guide"),
		clickWhenThere(`#viewer .markdown a`),
		shows(`#viewer article.file[data-path="README.md"] .markdown h1`),
	)
	if err != nil {
		t.Fatalf("back to the rendering and the README: %v; the page has %s", err, pageState(ctx))
	}
	quiet("the README opened as a file")
}

// clickWhenThere clicks the first element sel matches once there is one,
// in the page: the viewer swaps its content as files open, and a click
// through DevTools may find the node it looked up gone ("Could not find
// node with given id").
func clickWhenThere(sel string) chromedp.Action[chromedp.Void] {
	return untilPage(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel))
}
