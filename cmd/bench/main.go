// Command bench starts a real Atelier server and measures, over HTTP, what a
// person goes through: a keystroke's round trip, a terminal's throughput, a
// one-shot command, the first command's checkout and an import. Each figure
// is printed next to its anchor measured in the same run (the raw PTY,
// ttyd, bash -c true, git checkout, git add and commit of the same tree)
// and the target of issue 15, with how far it misses.
//
//	go run ./cmd/bench          # the sizes of issue 15
//	go run ./cmd/bench -short   # a few seconds of measuring, for CI
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	short := flag.Bool("short", false, "small sizes, to check that every row still measures (CI)")
	flag.Parse()
	table, err := run(sizesFor(*short), os.Stderr)
	fmt.Print(table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// sizes are one run's workload.
type sizes struct {
	keys       int   // keystrokes timed
	catBytes   int64 // size of the file cat prints
	runs       int   // one-shot commands timed on each project
	smallFiles int
	largeFiles int // the tree imported, checked out and committed
}

func sizesFor(short bool) sizes {
	if short {
		return sizes{keys: 40, catBytes: 1 << 20, runs: 5, smallFiles: 10, largeFiles: 200}
	}
	return sizes{keys: 2000, catBytes: 64 << 20, runs: 30, smallFiles: 10, largeFiles: 11500}
}

// row is one line of the table.
type row struct {
	measure, atelier, anchor, target, result string
}

func (r row) String() string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s |\n", r.measure, r.atelier, r.anchor, r.target, r.result)
}

// run measures everything and renders the table. A row that could not be
// measured at all is an error: the command has rotted.
func run(sz sizes, logw io.Writer) (string, error) {
	b, err := newBench(sz, logw)
	if err != nil {
		return "", err
	}
	defer b.close()
	var rows []row
	for _, step := range []func() ([]row, error){b.terminal, b.commands} {
		rs, err := step()
		if err != nil {
			return "", err
		}
		rows = append(rows, rs...)
	}
	var out strings.Builder
	out.WriteString("| measure | Atelier | anchor, same run | target | result |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		out.WriteString(r.String())
	}
	return out.String(), nil
}
