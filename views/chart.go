package views

import (
	"fmt"
	"html/template"
	"strings"
)

// Bar is one bar of a chart: its label (shown on hover) and its value.
type Bar struct {
	Label string
	Value int64
}

// Chart geometry, in SVG units.
const (
	chartBarWidth = 14
	chartGap      = 4
	chartHeight   = 32
)

// BarChart draws bars as a small inline SVG, scaled so that the largest
// value or limit fills the height, with limit (a cap, when above zero) as
// a dashed line. Only numbers and escaped labels go into it, so it is safe
// to embed; it needs no script and no inline style, which the pages' CSP
// forbids.
func BarChart(bars []Bar, limit int64, title string) template.HTML {
	top := limit
	for _, b := range bars {
		top = max(top, b.Value)
	}
	width := len(bars)*(chartBarWidth+chartGap) - chartGap
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		max(width, 1), chartHeight, max(width, 1), chartHeight, template.HTMLEscapeString(title))
	for i, b := range bars {
		h := 0
		if top > 0 {
			h = int(b.Value * chartHeight / top)
		}
		if b.Value > 0 && h == 0 {
			h = 1 // a month with any use shows
		}
		fmt.Fprintf(&sb, `<rect class="bar" x="%d" y="%d" width="%d" height="%d" data-value="%d"><title>%s</title></rect>`,
			i*(chartBarWidth+chartGap), chartHeight-h, chartBarWidth, h, b.Value, template.HTMLEscapeString(b.Label))
	}
	if limit > 0 && top > 0 {
		y := chartHeight - int(limit*chartHeight/top)
		fmt.Fprintf(&sb, `<line class="limit" x1="0" y1="%d" x2="%d" y2="%d" stroke-dasharray="2 2"/>`, y, width, y)
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String())
}
