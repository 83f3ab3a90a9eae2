package main

import (
	"os"
	"regexp"
	"testing"
)

// TestShortSuite runs the short abuse suite against two real instances
// behind HAProxy: every bound must hold, whichever instance each request
// reaches.
func TestShortSuite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, since the embedded PostgreSQL runs as the postgres account")
	}
	table, err := run(true, true, regexp.MustCompile(""), os.Stderr)
	t.Log("\n" + table)
	if err != nil {
		t.Fatal(err)
	}
}
