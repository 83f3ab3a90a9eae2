package views

import (
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// hostile is Markdown that tries every way we know to run or load
// something: scripts, event handlers, javascript: and data: links in
// Markdown and in raw HTML, styles that load, frames, objects, forms,
// SVG and MathML, a base and a meta refresh, entity-spelled schemes.
const hostile = "# Notes\n\n" +
	"<script>window.ran = 1</script>\n\n" +
	"<img src=\"x.png\" onerror=\"window.ran = 2\">\n\n" +
	"[click](javascript:window.ran=3) [CLICK](JaVaScRiPt:window.ran=3) [spaced]( javascript:window.ran=3 )\n\n" +
	"[tab](java&#x09;script:window.ran=3) [data](data:text/html,<script>window.ran=3</script>) [vb](vbscript:msgbox)\n\n" +
	"<a href=\"javascript:window.ran=4\" onclick=\"window.ran=4\" onmouseover=\"window.ran=4\">raw link</a>\n\n" +
	"<div style=\"background:url(/x)\" class=\"danger-zone\" id=\"viewer\" onclick=\"window.ran=5\">raw div</div>\n\n" +
	"<style>body{background:url(/x)}</style><link rel=stylesheet href=/x.css>\n\n" +
	"<iframe src=\"/\"></iframe><iframe srcdoc=\"<script>parent.ran=6</script>\"></iframe>\n\n" +
	"<object data=\"/x\"></object><embed src=\"/x\"><video src=/x poster=/y></video><audio src=/x></audio>\n\n" +
	"<svg onload=\"window.ran=7\"><script>window.ran=7</script></svg><math><mi xlink:href=\"javascript:alert(1)\">x</mi></math>\n\n" +
	"<form action=\"/logout\" method=post><input name=q><button formaction=/x>go</button></form>\n\n" +
	"<base href=\"https://evil.example/\"><meta http-equiv=\"refresh\" content=\"0;url=https://evil.example\">\n\n" +
	"<details open ontoggle=\"window.ran=8\"><summary>More</summary>inside</details>\n\n" +
	"<a href=\"/x\" name=\"csrf_token\" target=\"_top\" ping=\"https://evil.example\">named</a>\n\n" +
	"![pixel](https://tracker.example/p.gif) ![inline](data:image/png;base64,iVBORw0KGgo=)\n"

// Rendered Markdown holds nothing that acts or loads by itself: every
// element and attribute is one the sanitizer keeps, no URL has a scheme but
// http, https or mailto, and no id can stand in for one of the page's.
func TestMarkdownRunsNothing(t *testing.T) {
	out, err := Markdown(hostile, MarkdownPlace{ProjectID: 3})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	inert := map[string]bool{"html": true, "head": true, "body": true, "h1": true, "p": true, "a": true, "img": true,
		"div": true, "details": true, "summary": true}
	attrs := map[string]bool{"href": true, "src": true, "alt": true, "rel": true, "id": true, "open": true}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if !inert[n.Data] {
				t.Errorf("<%s> is kept", n.Data)
			}
			for _, a := range n.Attr {
				if !attrs[a.Key] {
					t.Errorf("<%s %s=%q> is kept", n.Data, a.Key, a.Val)
				}
				if a.Key == "id" && !strings.HasPrefix(a.Val, idPrefix) {
					t.Errorf("<%s id=%q> could stand for one of the page's ids", n.Data, a.Val)
				}
				if a.Key == "href" || a.Key == "src" {
					u, err := url.Parse(a.Val)
					if err != nil || u.Scheme != "" && u.Scheme != "https" {
						t.Errorf("<%s %s=%q> leads somewhere it must not", n.Data, a.Key, a.Val)
					}
					if a.Key == "src" && (u.Host != "" || !strings.HasPrefix(u.Path, "/projects/3/code/raw")) {
						t.Errorf("<img src=%q> loads from outside the project", a.Val)
					}
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	for _, text := range []string{"raw link", "raw div", "More", "inside", "named", "image: pixel"} {
		if !strings.Contains(string(out), text) {
			t.Errorf("the text %q is lost: %s", text, out)
		}
	}
	if strings.Contains(string(out), "window.ran") {
		t.Errorf("a script's text is shown: %s", out)
	}
}

// Relative links go to the Code page of the file or folder they name and
// images to the file's bytes, both from the Markdown file's folder, never
// above the project's top; fragments name the prefixed heading ids.
func TestMarkdownLinksStayInTheProject(t *testing.T) {
	src := "# Getting Started\n\n" +
		"[guide](guide.md) [deep](../docs/api/Ref%20Card.md#the-map) [top](/README.md) [up](../../../../etc/passwd)\n" +
		"[folder](api/) [here](#getting-started) [site](https://example.com/a?b=c) [mail](mailto:a@example.com)\n\n" +
		"![shot](img/shot.png \"A shot\") <img src=\"../logo.png\" width=\"80\">\n"
	out, err := Markdown(src, MarkdownPlace{ProjectID: 3, Dir: "docs"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<h1 id="md-getting-started">`,
		`href="/projects/3/code?path=docs%2Fguide.md"`,
		`href="/projects/3/code?path=docs%2Fapi%2FRef+Card.md#md-the-map"`,
		`href="/projects/3/code?path=README.md"`,
		`href="/projects/3/code?path=etc%2Fpasswd"`,
		`href="/projects/3/code?path=docs%2Fapi"`,
		`href="#md-getting-started"`,
		`href="https://example.com/a?b=c"`,
		`href="mailto:a@example.com"`,
		`src="/projects/3/code/raw?path=docs%2Fimg%2Fshot.png"`,
		`title="A shot"`,
		`src="/projects/3/code/raw?path=logo.png"`,
		`width="80"`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
}

func TestIsMarkdown(t *testing.T) {
	for name, want := range map[string]bool{"README.md": true, "notes.MARKDOWN": true, "a.mdx": false, "README": false, "md": false} {
		if IsMarkdown(name) != want {
			t.Errorf("%s: %v", name, !want)
		}
	}
}
