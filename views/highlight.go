package views

import (
	"bytes"
	"html/template"
	"sync"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
)

// highlightStyle is the colour scheme of the viewer; darkHighlightStyle
// replaces it when the browser prefers a dark scheme.
const (
	highlightStyle     = "github"
	darkHighlightStyle = "github-dark"
)

// The formatter writes classes, not inline styles, because the pages'
// Content-Security-Policy forbids inline styles; HighlightCSS holds them.
// Each line number is written inside its line, not in a column of its own:
// a separate column has line boxes of its own that drift from the code's
// over a long file.
var formatter = chromahtml.New(
	chromahtml.WithClasses(true),
	chromahtml.WithLineNumbers(true),
	chromahtml.WithLinkableLineNumbers(true, "L"),
)

// Highlight renders text as highlighted HTML with line numbers, choosing the
// language by the file name and, failing that, by the content.
func Highlight(name, text string) (template.HTML, error) {
	lexer := lexers.Match(name)
	if lexer == nil {
		lexer = lexers.Analyse(text)
	}
	if lexer == nil {
		lexer = lexers.Fallback
	}
	it, err := chroma.Coalesce(lexer).Tokenise(nil, text)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := formatter.Format(&buf, styles.Get(highlightStyle), it); err != nil {
		return "", err
	}
	return template.HTML(buf.String()), nil // chroma escapes the code itself
}

var highlightCSS = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	if err := formatter.WriteCSS(&buf, styles.Get(highlightStyle)); err != nil {
		panic(err) // a built-in style always renders
	}
	buf.WriteString("\n@media (prefers-color-scheme: dark) {\n")
	if err := formatter.WriteCSS(&buf, styles.Get(darkHighlightStyle)); err != nil {
		panic(err)
	}
	buf.WriteString("}\n")
	return buf.Bytes()
})

// HighlightCSS is the stylesheet of Highlight's classes.
func HighlightCSS() []byte { return highlightCSS() }
