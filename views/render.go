// Package views renders Atelier's pages: html/template layouts, pages and
// partials (embedded), and the one Render that answers a full page, the
// fragment alone for htmx, or JSON.
package views

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

//go:embed templates
var templateFS embed.FS

// JSONer is a view with its own JSON shape; other views are marshalled as
// they are.
type JSONer interface {
	JSON() any
}

// Page is what every template receives: the chrome and the view's data.
type Page struct {
	User any // the signed-in person, or nil
	CSRF string
	Data any
}

// Chrome gives what every page shows besides its view: the signed-in person
// (nil when nobody is) and the request's CSRF token. The handlers know who is
// signed in; views only shows it.
type Chrome func(c *gin.Context) (user any, csrf string)

// Renderer holds one template set per page and one for the partials.
type Renderer struct {
	sets   map[string]*template.Template
	chrome Chrome
}

// NewRenderer parses every template once.
func NewRenderer(chrome Chrome) (*Renderer, error) {
	r := &Renderer{sets: map[string]*template.Template{}, chrome: chrome}
	partials, err := fs.Glob(templateFS, "templates/partials/*.html")
	if err != nil {
		return nil, err
	}
	pages, err := fs.Glob(templateFS, "templates/pages/*.html")
	if err != nil {
		return nil, err
	}
	for _, page := range pages {
		files := append([]string{"templates/layout.html", page}, partials...)
		t, err := template.New("").Funcs(funcs).ParseFS(templateFS, files...)
		if err != nil {
			return nil, fmt.Errorf("views: %s: %w", page, err)
		}
		r.sets[strings.TrimSuffix(path.Base(page), ".html")] = t
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, partials...)
	if err != nil {
		return nil, fmt.Errorf("views: partials: %w", err)
	}
	for _, p := range partials {
		r.sets["partials/"+strings.TrimSuffix(path.Base(p), ".html")] = t
	}
	return r, nil
}

var funcs = template.FuncMap{
	// sub hands a partial the chrome of the page it sits in with its own data.
	"sub": func(parent Page, data any) Page { return Page{User: parent.User, CSRF: parent.CSRF, Data: data} },
	// join appends a name to a folder path of the tree ("" is the root).
	"join": func(dir, name string) string {
		if dir == "" {
			return name
		}
		return dir + "/" + name
	},
	// url builds every link that carries a name: see URL.
	"url":   URL,
	"bytes": humanBytes,
	// percent is used/whole in whole percent.
	"percent": func(used, whole int64) int64 {
		if whole <= 0 {
			return 100
		}
		return used * 100 / whole
	},
	"minutes": func(seconds int64) int64 { return seconds / 60 },
	// percentOf is pct percent of whole.
	"percentOf": func(whole int64, pct int) int64 { return whole * int64(pct) / 100 },
	// lines splits text into its lines.
	"lines": func(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") },
	// diffClass colours a line of a unified diff.
	"diffClass": func(line string) string {
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
			return "file"
		case strings.HasPrefix(line, "@@"):
			return "hunk"
		case strings.HasPrefix(line, "+"):
			return "add"
		case strings.HasPrefix(line, "-"):
			return "del"
		}
		return ""
	},
	"ms":    func(d time.Duration) int64 { return d.Milliseconds() },
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") },
	// when writes a moment as people read it: how long ago, with the exact
	// time on hover and for machines.
	"when": when,
	// took writes a duration in milliseconds as people read it.
	"took": took,
	// lasted is how long from from to to took, as took writes it.
	"lasted": func(from, to time.Time) string { return took(to.Sub(from).Milliseconds()) },
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
	// left writes a time left, to the second.
	"left": func(d time.Duration) string {
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm %02ds", d/time.Minute, d%time.Minute/time.Second)
	},
	// icon names the tree's icon of an entry; crumbs splits a path.
	"icon":   iconOf,
	"crumbs": crumbsOf,
	// shown writes a name or path with what a browser would hide escaped;
	// shownPiece a piece of one.
	"shown":      shown,
	"shownPiece": shownPiece,
	// projectTabs starts the tabs every page of a project shows.
	"projectTabs": tabsOf,
	// since is how long ago t was, to the second.
	"since": func(t time.Time) time.Duration { return time.Since(t).Round(time.Second) },
}

// Render answers with view: JSON when the client asks for
// application/json, the page's "content" fragment for an htmx request that is
// not boosted and not a history restore, else the full page. name is a page
// ("project") or a partial ("partials/members"). The template runs into a
// buffer first, so a failing template never sends half a page.
func (r *Renderer) Render(c *gin.Context, status int, name string, view any) error {
	c.Header("Vary", "HX-Request, Accept")
	if WantsJSON(c.Request) {
		if j, ok := view.(JSONer); ok {
			view = j.JSON()
		}
		c.JSON(status, view)
		return nil
	}
	set, ok := r.sets[name]
	if !ok {
		return fmt.Errorf("views: no template %q", name)
	}
	entry := "layout"
	switch {
	case strings.HasPrefix(name, "partials/"):
		entry = strings.TrimPrefix(name, "partials/")
	case isFragment(c.Request):
		entry = "content"
	}
	var buf bytes.Buffer
	user, csrf := r.chrome(c)
	page := Page{User: user, CSRF: csrf, Data: view}
	if err := set.ExecuteTemplate(&buf, entry, page); err != nil {
		return fmt.Errorf("views: %s: %w", name, err)
	}
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
	return nil
}

// Fragment renders the partial name ("partials/search_file") with view
// into bytes, for an answer written in pieces (a stream of events).
func (r *Renderer) Fragment(c *gin.Context, name string, view any) ([]byte, error) {
	set, ok := r.sets[name]
	if !ok {
		return nil, fmt.Errorf("views: no template %q", name)
	}
	var buf bytes.Buffer
	user, csrf := r.chrome(c)
	if err := set.ExecuteTemplate(&buf, strings.TrimPrefix(name, "partials/"), Page{User: user, CSRF: csrf, Data: view}); err != nil {
		return nil, fmt.Errorf("views: %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// WantsJSON reports whether the client asked for JSON rather than HTML.
// An EventSource (Accept: text/event-stream) cannot show a page either: a
// refused stream gets the short JSON problem, which also keeps a flood of
// refused streams cheap.
func WantsJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	return r.Header.Get("HX-Request") == "" &&
		(strings.Contains(accept, "application/json") || strings.HasPrefix(accept, "text/event-stream"))
}

// IsHTMX reports whether htmx sent the request.
func IsHTMX(r *http.Request) bool { return r.Header.Get("HX-Request") == "true" }

func isFragment(r *http.Request) bool {
	return IsHTMX(r) &&
		r.Header.Get("HX-Boosted") != "true" &&
		r.Header.Get("HX-History-Restore-Request") != "true"
}

// Redirect sends the client to location after a successful form post: 303
// for browsers, and HX-Redirect for htmx (fetch would follow a 303 and swap
// the whole next page into the target).
func Redirect(c *gin.Context, location string) {
	if IsHTMX(c.Request) {
		c.Header("HX-Redirect", location)
		c.Status(http.StatusNoContent)
		return
	}
	c.Redirect(http.StatusSeeOther, location)
}

// humanBytes writes a size the way people read it.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
