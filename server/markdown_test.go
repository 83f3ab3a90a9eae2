package server

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// hostileReadme is a README that tries to run something in every way a
// README can, beside what a README really holds: relative links to a
// file and a folder, a relative image.
const hostileReadme = "# Project notes\n\n" +
	"Read [the guide](docs/guide.md), see [the docs folder](docs/) and [the top](#project-notes).\n\n" +
	"![a shot](docs/shot.png)\n\n" +
	"<script>window.ran = 'script'</script>\n\n" +
	"<img src=\"docs/shot.png\" onerror=\"window.ran = 'onerror'\" onload=\"window.ran = 'onload'\">\n\n" +
	"[click me](javascript:window.ran='link') <a href=\"javascript:window.ran='raw'\" onclick=\"window.ran='onclick'\">raw link</a>\n\n" +
	"<div style=\"background:url(/favicon.ico)\" onmouseover=\"window.ran='hover'\">raw html</div>\n\n" +
	"<iframe srcdoc=\"<script>parent.ran='frame'</script>\"></iframe><svg onload=\"window.ran='svg'\"></svg>\n"

// pngImage is a small real PNG.
func pngImage(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// markdownProject is a project whose README, docs and a folder's plain
// README are what the Markdown tests read; it returns its owner and id.
func markdownProject(t *testing.T, h *harness) (*client, int64) {
	t.Helper()
	owner := h.user("owner", false)
	id := owner.createProject("notes")
	res := owner.upload(id, "notes.tar.gz", tarGz(t, []entry{
		{name: "README.md", body: hostileReadme},
		{name: "docs/guide.md", body: "# The guide\n\nBack to [the README](../README.md).\n"},
		{name: "docs/Readme.markdown", body: "# The docs folder\n"},
		{name: "docs/README.txt", body: "the plain one loses to the Markdown one\n"},
		{name: "docs/shot.png", body: pngImage(t)},
		{name: "src/readme", body: "plain words, shown as they are\n"},
		{name: "src/main.go", body: "package main\n"},
	}), jsonAccept)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
	return owner, id
}

// noActiveContent fails on anything in sel's HTML that could act: a
// script, a frame, an embedded document, an event handler, a style, a
// javascript: URL.
func noActiveContent(t *testing.T, where string, doc *goquery.Document, sel string) {
	t.Helper()
	root := doc.Find(sel)
	if root.Length() == 0 {
		t.Fatalf("%s: no %s", where, sel)
	}
	if n := root.Find("script, style, iframe, object, embed, svg, math, form, base, meta, link").Length(); n > 0 {
		t.Errorf("%s: %d active elements kept", where, n)
	}
	root.Find("*").Each(func(_ int, s *goquery.Selection) {
		for _, a := range s.Nodes[0].Attr {
			v := strings.ToLower(strings.TrimSpace(a.Val))
			if strings.HasPrefix(a.Key, "on") || a.Key == "style" || a.Key == "srcdoc" ||
				strings.HasPrefix(v, "javascript:") || strings.HasPrefix(v, "data:") {
				t.Errorf("%s: <%s %s=%q> kept", where, goquery.NodeName(s), a.Key, a.Val)
			}
		}
	})
}

// The Code page renders a folder's README below its tree, Markdown files
// when they are opened, and the source on request; what the Markdown
// holds runs nothing, and its links and images stay in the project.
func TestCodePageRendersMarkdown(t *testing.T) {
	h := newHarness(t)
	owner, id := markdownProject(t, h)
	code := "/projects/" + itoa(id) + "/code"

	for _, mode := range []string{"page", "htmx"} {
		get := owner.page
		if mode == "htmx" {
			get = owner.fragment
		}
		doc := get(code)
		where := mode + " " + code
		noActiveContent(t, where, doc, "#viewer article.readme .markdown")
		readme := doc.Find("#viewer article.readme")
		if got := readme.AttrOr("data-path", ""); got != "README.md" {
			t.Errorf("%s: the README shown is %q", where, got)
		}
		if readme.Find(`h1#md-project-notes`).Text() != "Project notes" {
			t.Errorf("%s: no heading: %s", where, readme.Text())
		}
		for sel, want := range map[string]string{
			`a:contains("the guide")`:             code + "?path=docs%2Fguide.md",
			`a:contains("the docs folder")`:       code + "?path=docs",
			`a:contains("the top")`:               "#md-project-notes",
			`.markdown-toggle [data-view=source]`: code + "?path=README.md&view=source",
		} {
			if got := readme.Find(sel).AttrOr("href", ""); got != want {
				t.Errorf("%s: %s leads to %q, want %q", where, sel, got, want)
			}
		}
		if got := readme.Find(`img[alt="a shot"]`).AttrOr("src", ""); got != code+"/raw?path=docs%2Fshot.png" {
			t.Errorf("%s: the image loads %q", where, got)
		} else if res := owner.get(got, nil); res.StatusCode != http.StatusOK || readBody(res) != pngImage(t) {
			t.Errorf("%s: the image's address answers %d", where, res.StatusCode)
		}
		for _, text := range []string{"click me", "raw link", "raw html"} {
			if !strings.Contains(readme.Text(), text) {
				t.Errorf("%s: the text %q is lost", where, text)
			}
		}
	}

	// A folder shows its README (Markdown first), the tree open down to it.
	doc := owner.page(code + "?path=docs")
	if got := doc.Find("#viewer article.readme").AttrOr("data-path", ""); got != "docs/Readme.markdown" {
		t.Errorf("the docs folder shows the README %q", got)
	}
	if doc.Find(`#viewer .markdown h1`).Text() != "The docs folder" {
		t.Errorf("the docs README reads %q", doc.Find("#viewer").Text())
	}
	if doc.Find(`.tree-pane details[open] > summary[data-path="docs"]`).Length() != 1 ||
		doc.Find(`.tree-pane a[data-path="docs/guide.md"]`).Length() != 1 {
		t.Error("the tree is not open at the docs folder")
	}
	// A README that is not Markdown shows as text.
	doc = owner.page(code + "?path=src")
	if got := doc.Find("#viewer article.readme .highlight").Text(); !strings.Contains(got, "plain words, shown as they are") ||
		doc.Find("#viewer .markdown, #viewer .markdown-toggle").Length() != 0 {
		t.Errorf("src's README reads %q", doc.Find("#viewer").Text())
	}

	// A Markdown file opens rendered, its links resolved from its folder.
	for _, mode := range []string{"page", "htmx"} {
		path := code + "?path=docs%2Fguide.md"
		get := owner.page
		if mode == "htmx" {
			path, get = code+"/file?path=docs%2Fguide.md", owner.fragment
		}
		doc := get(path)
		if got := doc.Find(`article.file .markdown a:contains("the README")`).AttrOr("href", ""); got != code+"?path=README.md" {
			t.Errorf("%s %s: the link back leads to %q", mode, path, got)
		}
		if doc.Find(`.markdown-toggle [data-view=rendered][aria-current]`).Length() != 1 {
			t.Errorf("%s %s: the toggle does not say the file is rendered", mode, path)
		}
	}

	// The toggle's other side shows the source, as text.
	for _, mode := range []string{"page", "htmx"} {
		path := code + "?path=README.md&view=source"
		get := owner.page
		if mode == "htmx" {
			path, get = code+"/file?path=README.md&view=source", owner.fragment
		}
		doc := get(path)
		if got := doc.Find("article.file .highlight").Text(); !strings.Contains(got, "<script>window.ran = 'script'</script>") {
			t.Errorf("%s %s: the source reads %q", mode, path, got)
		}
		if doc.Find("article.file .markdown").Length() != 0 || doc.Find("#viewer script, article.file script").Length() != 0 {
			t.Errorf("%s %s: rendered beside the source", mode, path)
		}
		if got := doc.Find(`.markdown-toggle [data-view=rendered]`).AttrOr("href", ""); got != code+"?path=README.md" {
			t.Errorf("%s %s: the way back to the rendering is %q", mode, path, got)
		}
	}
}
