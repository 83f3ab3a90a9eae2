package handlers

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"atelier/search"
	"atelier/views"
)

// searchView is a content search's answer: the files with their matching
// lines, as links into the Code page or the session, and how it ended.
type searchView struct {
	Query   search.Query
	Files   []searchFileView
	Summary search.Summary
	// Failed says the search broke off after it had begun to answer, as
	// Problem tells.
	Failed  bool
	Problem string
	// The caps, for the summary to name.
	MaxMatches, MaxPerFile int
}

func newSearchView(q search.Query) searchView {
	return searchView{Query: q, MaxMatches: search.MaxMatches, MaxPerFile: search.MaxPerFile}
}

type searchFileView struct {
	Path  string
	Href  string
	Lines []searchLineView
	More  bool
	// Continues: the file's earlier lines came just before (a stream hands
	// a file on in pieces as git writes it), so no heading again.
	Continues bool
	// Session: the links open the file in the workbench's editor.
	Session bool
}

type searchLineView struct {
	search.Line
	Href string
	Runs []findRun
}

// searchFormView is the search box: where it asks, where the answer goes
// (a CSS selector), and the query it shows.
type searchFormView struct {
	Action string
	Target string
	Query  search.Query
}

// searchMatch is one line of the JSON answer.
type searchMatch struct {
	Path string `json:"path"`
	search.Line
}

func (v searchView) JSON() any {
	matches := []searchMatch{}
	for _, f := range v.Files {
		for _, l := range f.Lines {
			matches = append(matches, searchMatch{Path: f.Path, Line: l.Line})
		}
	}
	return gin.H{"query": v.Query.Text, "regex": v.Query.Regex, "case": v.Query.Case, "matches": matches,
		"files": v.Summary.Files, "truncated": v.Summary.Truncated, "timedOut": v.Summary.TimedOut, "partial": v.Summary.Partial}
}

// searchQuery reads ?q=, ?regex= and ?case= (1, true or on: a checkbox).
func searchQuery(c *gin.Context) search.Query {
	on := func(k string) bool {
		switch c.Query(k) {
		case "1", "true", "on":
			return true
		}
		return false
	}
	return search.Query{Text: c.Query("q"), Regex: on("regex"), Case: on("case")}
}

// searcher runs a compiled search, handing each file to emit.
type searcher func(ctx context.Context, m *search.Matcher, emit func(search.File) error) (search.Summary, error)

// linker gives the address of a file, and of one of its lines.
type linker struct {
	file    func(path string) string
	session bool
}

func (l linker) view(f search.File, continues bool) searchFileView {
	href := l.file(f.Path)
	v := searchFileView{Path: f.Path, Href: href, More: f.More, Continues: continues, Session: l.session}
	for _, line := range f.Lines {
		v.Lines = append(v.Lines, searchLineView{Line: line, Href: fmt.Sprintf("%s#L%d", href, line.Line), Runs: runsOfRanges(line.Text, line.Ranges)})
	}
	return v
}

// runsOfRanges splits a line's text into runs, marking the matches.
func runsOfRanges(text string, ranges [][2]int) []findRun {
	var runs []findRun
	at := 0
	for _, r := range ranges {
		if r[0] > at {
			runs = append(runs, findRun{Text: text[at:r[0]]})
		}
		runs = append(runs, findRun{Text: text[r[0]:r[1]], Hit: true})
		at = r[1]
	}
	if at < len(text) {
		runs = append(runs, findRun{Text: text[at:]})
	}
	return runs
}

// wantsEvents says the client reads the answer as it comes, as events
// (htmx with its SSE extension, an EventSource).
func wantsEvents(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// answerSearch compiles the query and answers the search: as a stream of
// events, one rendered file a message and the summary last, when the
// client reads events; else whole, through page (nil: the results alone).
// A refusal of the query, or a failure before the first file, keeps its
// own status.
func answerSearch(c *gin.Context, r *views.Renderer, run searcher, l linker, page func(searchView) error) error {
	q := searchQuery(c)
	m, err := search.Compile(q)
	if err != nil {
		return err
	}
	ctx := c.Request.Context()
	if wantsEvents(c.Request) {
		return streamSearch(c, r, q, m, run, l)
	}
	v := newSearchView(q)
	v.Summary, err = run(ctx, m, func(f search.File) error {
		if n := len(v.Files); n > 0 && v.Files[n-1].Path == f.Path {
			more := l.view(f, true)
			v.Files[n-1].Lines = append(v.Files[n-1].Lines, more.Lines...)
			v.Files[n-1].More = v.Files[n-1].More || f.More
			return nil
		}
		v.Files = append(v.Files, l.view(f, false))
		return nil
	})
	if err != nil {
		return err
	}
	if page != nil && !views.WantsJSON(c.Request) && !views.IsHTMX(c.Request) {
		return page(v)
	}
	return r.Render(c, http.StatusOK, "partials/search", v)
}

// streamSearch writes each file as an SSE message of its rendered HTML as
// soon as it is found, then the summary. Nothing is written before the
// first message, so an early failure keeps its status.
func streamSearch(c *gin.Context, r *views.Renderer, q search.Query, m *search.Matcher, run searcher, l linker) error {
	w := c.Writer
	started := false
	send := func(html []byte) {
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		var b bytes.Buffer
		for _, line := range bytes.Split(bytes.TrimRight(html, "\n"), []byte("\n")) {
			b.WriteString("data: ")
			b.Write(bytes.TrimSuffix(line, []byte("\r")))
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
		w.Write(b.Bytes()) // a reader gone ends the search through its context
		w.Flush()
	}
	last := ""
	sum, err := run(c.Request.Context(), m, func(f search.File) error {
		html, err := r.Fragment(c, "partials/search_file", l.view(f, f.Path == last))
		if err != nil {
			return err
		}
		last = f.Path
		send(html)
		return nil
	})
	if err != nil && !started {
		return err
	}
	v := newSearchView(q)
	v.Summary, v.Failed = sum, err != nil
	if err != nil {
		v.Problem = ProblemOf(err).Message
	}
	html, err := r.Fragment(c, "partials/search_summary", v)
	if err != nil {
		return err
	}
	send(html)
	return nil
}
