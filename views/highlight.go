package views

import (
	"bytes"
	"fmt"
	"html/template"
	"sort"
	"strings"
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
	dark := styles.Get(darkHighlightStyle)
	if err := formatter.WriteCSS(&buf, dark); err != nil {
		panic(err)
	}
	writeUncoloured(&buf, styles.Get(highlightStyle), dark)
	buf.WriteString("}\n")
	return buf.Bytes()
})

// writeUncoloured gives the dark scheme's text colour to every token the
// light scheme colours and the dark one leaves to the text's colour: the
// dark rules only override what they name, so such a token would keep its
// light colour, dark on dark.
func writeUncoloured(buf *bytes.Buffer, light, dark *chroma.Style) {
	lightBg, darkBg := light.Get(chroma.Background), dark.Get(chroma.Background)
	var classes []string
	for t, class := range chroma.StandardTypes {
		if t == chroma.Background || class == "" {
			continue
		}
		if light.Get(t).Sub(lightBg).Colour.IsSet() && !dark.Get(t).Sub(darkBg).Colour.IsSet() {
			classes = append(classes, ".chroma ."+class)
		}
	}
	if len(classes) == 0 {
		return
	}
	sort.Strings(classes)
	fmt.Fprintf(buf, "%s { color: %s }\n", strings.Join(classes, ", "), darkBg.Colour)
}

// HighlightCSS is the stylesheet of Highlight's classes.
func HighlightCSS() []byte { return highlightCSS() }
