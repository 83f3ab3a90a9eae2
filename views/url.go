package views

import (
	"fmt"
	"net/url"
	"strings"
)

// Link is an address of Atelier being built. Every link, redirect and
// script URL that carries something a person named (a file, a folder, a
// user) is built with URL, so a name like "b+c.txt", "x#y.txt" or
// "a&path=README.md" stays one value and never becomes part of the URL's
// syntax. Templates reach it as "url":
//
//	{{(url "/projects" .ProjectID "code" "file").Query "path" .Path}}
type Link struct {
	path  string
	query url.Values
}

// URL starts a link at base, a path the code wrote itself ("/projects", or
// a Link built before), and appends each segment escaped as one path
// segment: a "/" inside a segment stays inside it. A segment is never ""
// or a dot segment ("." or ".."), which a browser would resolve away; the
// segments passed here are ids and checked names, and file paths travel in
// the query.
func URL(base any, segments ...any) Link {
	if l, ok := base.(Link); ok && len(l.query) > 0 {
		if len(segments) > 0 {
			panic("views: a link with a query cannot take more path segments")
		}
		return l
	}
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(fmt.Sprint(base), "/"))
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(fmt.Sprint(s)))
	}
	l := Link{path: b.String()}
	if l.path == "" {
		l.path = "/"
	}
	return l
}

// Query returns the link with the given key, value pairs added to its
// query. An odd count is a mistake in a template, which the template
// engine turns into an error for the page.
func (l Link) Query(pairs ...any) Link {
	if len(pairs)%2 != 0 {
		panic(fmt.Sprintf("views: Query takes key, value pairs, got %d values", len(pairs)))
	}
	q := url.Values{}
	for k, vs := range l.query {
		q[k] = append([]string(nil), vs...)
	}
	for i := 0; i < len(pairs); i += 2 {
		q.Add(fmt.Sprint(pairs[i]), fmt.Sprint(pairs[i+1]))
	}
	return Link{path: l.path, query: q}
}

// String is the link as it goes into a page or a Location header.
func (l Link) String() string {
	if len(l.query) == 0 {
		return l.path
	}
	return l.path + "?" + l.query.Encode()
}
