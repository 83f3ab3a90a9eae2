// Command bench starts a real Atelier server and measures, over HTTP, what a
// person goes through: a keystroke's round trip, a terminal's throughput, a
// one-shot command, the first command's checkout, an import and a second
// session's `go build`. Each figure is printed next to its anchor measured
// in the same run (the raw PTY, ttyd, bash -c true, git checkout, git add
// and commit of the same tree, a warm `go build` on the host) and its
// target, with how far it misses.
//
// Every figure is the median of a few rounds, with the lowest and highest
// beside it.
//
//	go run ./cmd/bench                          # the sizes of issue 15, 3 rounds
//	go run ./cmd/bench -ttyd-src /path/to/ttyd  # and build ttyd when it is not on PATH
//	go run ./cmd/bench -short                   # a few seconds of measuring, 1 round, for CI
//
// With -drops it measures instead what a person typing into a terminal in
// Chromium meets when the network drops (resets, partitions, stranded
// connections, through a loopback proxy), on Atelier and on ttyd typed
// into the same way, and prints that table (drops.go); a few minutes.
//
//	go run ./cmd/bench -drops
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

func main() {
	serveFloorWhenAsked()
	// The kube rows' streaming server (testrig/kubeexec) logs each exec
	// connection its stop closes, a screenful after the table; what fails
	// reaches the bench through the executor. Set before anything runs:
	// klog's logger is the process's.
	klog.SetLogger(logr.Discard())
	short := flag.Bool("short", false, "small sizes and 1 round, to check that every row still measures (CI)")
	rounds := flag.Int("rounds", 0, "rounds of every measure, the median printed (default 3, or 1 with -short)")
	ttydSrc := flag.String("ttyd-src", os.Getenv(ttydSrcEnv), "ttyd's source folder, built into the user's cache folder when ttyd is not on PATH (default $"+ttydSrcEnv+")")
	drops := flag.Bool("drops", false, "measure typing through network drops in Chromium, on Atelier and on ttyd, instead")
	flag.Parse()
	if *drops {
		table, err := runDrops(networkDrops, *ttydSrc, os.Stderr)
		fmt.Print(table)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	sz := sizesFor(*short)
	if *rounds > 0 {
		sz.rounds = *rounds
	}
	table, err := run(sz, *ttydSrc, os.Stderr)
	fmt.Print(table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// sizes are one run's workload.
type sizes struct {
	rounds     int   // of every measure; the table shows the median
	keys       int   // keystrokes timed
	catBytes   int64 // size of the file cat prints
	runs       int   // one-shot commands timed on each project
	smallFiles int
	largeFiles int // the tree imported, checked out and committed
	// goSmall builds two packages that import nothing instead of a copy
	// of this repository's packages: its cold build is quick.
	goSmall bool
}

func sizesFor(short bool) sizes {
	if short {
		return sizes{rounds: 1, keys: 40, catBytes: 1 << 20, runs: 5, smallFiles: 10, largeFiles: 200, goSmall: true}
	}
	return sizes{rounds: 3, keys: 2000, catBytes: 64 << 20, runs: 30, smallFiles: 10, largeFiles: 11500}
}

// row is one line of the table.
type row struct {
	measure, atelier, anchor, target, result string
}

func (r row) String() string {
	cells := []string{r.measure, r.atelier, r.anchor, r.target, r.result}
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(c, "|", "/") // a reason quoting a tool must not split the row
	}
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// figure is one measure's value in each round: seconds, or bytes a second.
type figure []float64

func (f figure) median() float64 {
	if len(f) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(f))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// show is the median with its unit and, over several rounds, the lowest
// and highest in brackets: "0.41 ms (0.38–0.52)".
func (f figure) show(num func(float64) string, unit string) string {
	out := num(f.median()) + " " + unit
	if len(f) > 1 {
		out += " (" + num(slices.Min(f)) + "–" + num(slices.Max(f)) + ")"
	}
	return out
}

// run measures everything and renders the table. A row that could not be
// measured at all is an error: the command has rotted.
func run(sz sizes, ttydSrc string, logw io.Writer) (string, error) {
	b, err := newBench(sz, ttydSrc, logw)
	if err != nil {
		return "", err
	}
	defer b.close()
	var rows []row
	for _, step := range []func() ([]row, error){b.terminal, b.commands, b.goBuild, b.kubeExec} {
		rs, err := step()
		if err != nil {
			return "", err
		}
		rows = append(rows, rs...)
	}
	var out strings.Builder
	out.WriteString("The server runs with its shipped defaults (the session disk bound on), but for the bounds on what one person may import and hold at once, raised so that the rounds can run: " +
		strings.Join(benchLimits, ", ") + ".\n\n")
	measure := "measure (one round)"
	if sz.rounds > 1 {
		measure = fmt.Sprintf("measure, median of %d rounds (lowest–highest)", sz.rounds)
	}
	out.WriteString("| " + measure + " | Atelier | anchor, same run | target | result |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		out.WriteString(r.String())
	}
	return out.String(), nil
}
