package views

import (
	"bytes"
	"html/template"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	goldhtml "github.com/yuin/goldmark/renderer/html"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// MarkdownPlace is where a Markdown file sits: its relative links and
// images resolve from its folder inside its project.
type MarkdownPlace struct {
	ProjectID int64
	Dir       string // "" for the project's top folder
}

// IsMarkdown tells the files the Code page renders by their name.
func IsMarkdown(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown", ".mdown", ".mkd", ".mkdn":
		return true
	}
	return false
}

// markdown is GitHub's flavour: tables, strikethrough, bare links, task
// lists and heading anchors. Raw HTML is passed through to the sanitizer,
// which keeps what cannot act (a README's <details> or <img width>), so
// goldmark's own filter is not the guard here.
var markdown = goldmark.New(
	goldmark.WithExtensions(extension.GFM),
	goldmark.WithParserOptions(parser.WithAutoHeadingID()),
	goldmark.WithRendererOptions(goldhtml.WithUnsafe(),
		// An align attribute, not a style one: the pages' CSP refuses
		// inline styles and the sanitizer takes no style.
		extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
)

// idPrefix sets a document's ids apart from the page's, as GitHub's
// user-content- does: a heading named "viewer" must not stand in for the
// page's #viewer, in a selector or as a global name.
const idPrefix = "md-"

// sanitizer keeps structure, text, links and images, and nothing that
// acts or loads by itself: no script, style, frame, object, form, event
// handler, style attribute, class (but code's language), or id not set
// apart; links only to http, https, mailto and inside Atelier.
var sanitizer = sync.OnceValue(func() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	p.AllowElements("p", "br", "hr", "blockquote", "pre", "div", "span",
		"em", "strong", "b", "i", "u", "s", "del", "ins", "sub", "sup", "small", "mark", "kbd", "samp", "var", "abbr",
		"dl", "dt", "dd", "ul", "li", "details", "summary", "figure", "figcaption",
		"table", "thead", "tbody", "tfoot", "tr", "caption")
	p.AllowAttrs("id").Matching(regexp.MustCompile(`^`+idPrefix+`[\p{L}\p{N}_.:-]{1,200}$`)).OnElements("h1", "h2", "h3", "h4", "h5", "h6")
	p.AllowElements("h1", "h2", "h3", "h4", "h5", "h6")
	p.AllowAttrs("start").Matching(bluemonday.Integer).OnElements("ol")
	p.AllowElements("ol")
	p.AllowAttrs("align").Matching(regexp.MustCompile(`^(left|center|right)$`)).OnElements("th", "td", "p", "div", "h1", "h2", "h3")
	p.AllowAttrs("colspan", "rowspan").Matching(bluemonday.Integer).OnElements("th", "td")
	p.AllowElements("th", "td")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[\w+#-]{1,40}$`)).OnElements("code")
	p.AllowElements("code")
	p.AllowAttrs("open").Matching(regexp.MustCompile(`^(|open)$`)).OnElements("details")
	p.AllowAttrs("title").Matching(bluemonday.Paragraph).OnElements("a", "img", "abbr")
	p.AllowAttrs("href").OnElements("a")
	p.AllowAttrs("src").OnElements("img")
	p.AllowAttrs("alt").Matching(bluemonday.Paragraph).OnElements("img")
	p.AllowAttrs("width", "height").Matching(bluemonday.NumberOrPercent).OnElements("img")
	// A task list's boxes, shown and never sent.
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^(|checked|disabled)$`)).OnElements("input")
	p.RequireParseableURLs(true)
	p.AllowRelativeURLs(true)
	p.AllowURLSchemes("http", "https", "mailto")
	p.RequireNoFollowOnFullyQualifiedLinks(true)
	p.RequireNoReferrerOnFullyQualifiedLinks(true)
	return p
})

// Markdown renders a project's Markdown file as HTML that runs nothing:
// goldmark renders it, its links, images and ids are made to stay inside
// the project and the page (see place), and a sanitizer keeps only what
// cannot act, last, so a mistake before it cannot add anything active.
func Markdown(src string, at MarkdownPlace) (template.HTML, error) {
	var rendered bytes.Buffer
	if err := markdown.Convert([]byte(src), &rendered); err != nil {
		return "", err
	}
	body := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	nodes, err := html.ParseFragment(&rendered, body)
	if err != nil {
		return "", err
	}
	var placed bytes.Buffer
	for _, n := range nodes {
		body.AppendChild(n)
	}
	at.place(body)
	for n := body.FirstChild; n != nil; n = n.NextSibling {
		if err := html.Render(&placed, n); err != nil {
			return "", err
		}
	}
	return template.HTML(sanitizer().SanitizeReader(&placed).String()), nil
}

// place walks the document: relative links go to the Code page, relative
// images to the file's raw bytes, both resolved from at.Dir; a fragment
// and every id get the prefix; an image from elsewhere becomes a link to
// it, since the pages load nothing from other sites (their CSP would
// refuse it anyway, and a README should not tell a third party who reads
// it).
func (at MarkdownPlace) place(n *html.Node) {
	for c := n.FirstChild; c != nil; {
		next := c.NextSibling
		if c.Type == html.ElementNode {
			at.placeElement(c)
		}
		at.place(c)
		c = next
	}
}

func (at MarkdownPlace) placeElement(n *html.Node) {
	for i := range n.Attr {
		a := &n.Attr[i]
		switch {
		case a.Key == "id":
			a.Val = idPrefix + a.Val
		case a.Key == "href" && n.DataAtom == atom.A:
			a.Val = at.resolve(a.Val, false)
		case a.Key == "src" && n.DataAtom == atom.Img:
			if elsewhere(a.Val) {
				at.imageAsLink(n, a.Val)
				return
			}
			a.Val = at.resolve(a.Val, true)
		}
	}
}

// imageAsLink turns an image from another site into a link to it, named
// by its alt text.
func (at MarkdownPlace) imageAsLink(img *html.Node, src string) {
	name := "image"
	for _, a := range img.Attr {
		if a.Key == "alt" && strings.TrimSpace(a.Val) != "" {
			name = "image: " + a.Val
		}
	}
	link := &html.Node{Type: html.ElementNode, Data: "a", DataAtom: atom.A, Attr: []html.Attribute{{Key: "href", Val: src}}}
	link.AppendChild(&html.Node{Type: html.TextNode, Data: name})
	img.Parent.InsertBefore(link, img)
	img.Parent.RemoveChild(img)
}

// elsewhere is a URL with a scheme or a host of its own: not a file of the
// project.
func elsewhere(ref string) bool {
	u, err := url.Parse(strings.TrimSpace(ref))
	return err == nil && (u.Scheme != "" || u.Host != "")
}

// resolve maps a link or image reference of the document. One with a
// scheme or a host is left to the sanitizer (which keeps only http, https
// and mailto); a path becomes the Code page of that file or folder (or the
// file's raw bytes, for an image), a path from / starting at the
// project's top and ".." stopping there; a fragment names a prefixed id.
// What cannot be read becomes "", which the sanitizer drops.
func (at MarkdownPlace) resolve(ref string, image bool) string {
	ref = strings.TrimSpace(ref)
	u, err := url.Parse(ref)
	if err != nil {
		return ""
	}
	if u.Scheme != "" || u.Host != "" {
		return ref
	}
	fragment := ""
	if u.Fragment != "" && !image {
		fragment = (&url.URL{Fragment: idPrefix + u.Fragment}).String()
	}
	if u.Path == "" {
		return fragment
	}
	p := u.Path
	if !strings.HasPrefix(p, "/") {
		p = path.Join(at.Dir, p)
	}
	p = strings.Trim(path.Clean("/"+p), "/")
	switch {
	case image:
		return URL("/projects", at.ProjectID, "code", "raw").Query("path", p).String()
	case p == "":
		return URL("/projects", at.ProjectID, "code").String() + fragment
	}
	return URL("/projects", at.ProjectID, "code").Query("path", p).String() + fragment
}
