package main

import (
	"os"
	"strings"
	"testing"
)

// TestShortBench runs every measure at small sizes against a real server,
// so the bench command keeps working as the server changes; the figures
// are not judged here, on a machine shared with other tests.
func TestShortBench(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, since the embedded PostgreSQL runs as the postgres account")
	}
	table, err := run(sizesFor(true), os.Stderr)
	t.Log("\n" + table)
	if err != nil {
		t.Fatal(err)
	}
	for _, measure := range []string{"keystroke round trip", "terminal throughput", "one-shot `true`, 10-file", "one-shot `true`, 200-file", "first command's checkout", "import"} {
		if !strings.Contains(table, "| "+measure) {
			t.Errorf("no row for %q", measure)
		}
	}
	if strings.Count(table, "| met")+strings.Count(table, "| misses") != 6 {
		t.Errorf("every row must be judged against its target:\n%s", table)
	}
}
