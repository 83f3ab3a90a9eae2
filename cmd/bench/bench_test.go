package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets the test binary serve the HTTP floor, as the bench
// binary does: the bench starts a copy of whichever binary runs it.
func TestMain(m *testing.M) {
	serveFloorWhenAsked()
	os.Exit(m.Run())
}

// TestShortBench runs every measure at small sizes against a real server,
// so the bench command keeps working as the server changes; the figures
// are not judged here, on a machine shared with other tests. ttyd is
// measured when it is on PATH or its source is named by ATELIER_TTYD_SRC;
// otherwise its rows must say why not.
func TestShortBench(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, since the embedded PostgreSQL runs as the postgres account")
	}
	table, err := run(sizesFor(true), os.Getenv(ttydSrcEnv), os.Stderr)
	t.Log("\n" + table)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "shipped defaults") || !strings.Contains(table, "ATELIER_MAX_SESSIONS_PER_USER=1000") {
		t.Errorf("the table does not say which settings differ from the defaults:\n%s", table)
	}
	for _, measure := range []string{"keystroke round trip", "terminal throughput", "one-shot `true`, 10-file", "one-shot `true`, 200-file",
		diskOffMeasure, "first command's checkout", "a second session's first command", "the same, run 1s after opening", "import", goBuildMeasure,
		kubeMeasure + ": keystroke", kubeMeasure + ": `true`"} {
		if !strings.Contains(table, "| "+measure) {
			t.Errorf("no row for %q", measure)
		}
	}
	// Every row but the disk bound's cost is judged against its target.
	if strings.Count(table, "| met")+strings.Count(table, "| misses") != 9 {
		t.Errorf("every row must be judged against its target:\n%s", table)
	}
	checkTTYDShare(t, "terminal throughput", rowOf(table, "terminal throughput"))
	if key := rowOf(table, "keystroke round trip"); !ttydMeasured.MatchString(key) && !ttydNotMeasured.MatchString(key) {
		t.Errorf("the keystroke row neither measures ttyd nor says why not:\n%s", key)
	}
	// The keystroke and command rows say where the time goes.
	for measure, wants := range map[string][]*regexp.Regexp{
		"keystroke round trip":             {httpFloor, handlersTake, p99OfFloor},
		"one-shot `true`, 10-file":         {handlerTakes, stageRan, lookupAndAnswer},
		"a second session's first command": {handlerTakes, stageCheckout, stageRan},
		"the same, run 1s after opening":   {handlerTakes, stageCheckout, stageRan},
		diskOffMeasure:                     {diskCostsCommand, diskCostsFirst},
		"first command's checkout":         {exportTakes},
		"import":                           {writingTakes, publishingTakes},
		goBuildMeasure:                     {hostWarmBuild, firstSessionBuild},
		kubeMeasure + ": keystroke":        {execAddsKey},
		kubeMeasure + ": `true`":           {execAddsCommand},
	} {
		line := rowOf(table, measure)
		for _, want := range wants {
			if m := want.FindStringSubmatch(line); m == nil {
				t.Errorf("the row %q has no %s:\n%s", measure, want, line)
			} else if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 && !signed[want] {
				t.Errorf("the row %q's %s is not a measurement:\n%s", measure, want, line)
			}
		}
	}
}

var (
	execAddsKey     = regexp.MustCompile(`exec adds (-?\d+(?:\.\d+)?) ms a keystroke`)
	execAddsCommand = regexp.MustCompile(`exec adds (-?\d+(?:\.\d+)?) ms a command`)
	httpFloor       = regexp.MustCompile(`HTTP floor \([^)]+\) (\d+(?:\.\d+)?) ms`)
	handlersTake    = regexp.MustCompile(`handlers take (\d+(?:\.\d+)?) ms`)
	handlerTakes    = regexp.MustCompile(`handler takes (\d+(?:\.\d+)?) ms`)
	// How busy Atelier's server and its client kept the cores during the
	// cat (the first such note in the row is Atelier's).
	serverCores = regexp.MustCompile(`Atelier's server kept (\d+(?:\.\d+)?) of the \d+ cores busy`)
	clientCores = regexp.MustCompile(`Atelier's server kept [\d.]+ of the \d+ cores busy, its client (\d+(?:\.\d+)?)`)
	// A command's stages in the server (atelier_command_stage_seconds).
	stageRan        = regexp.MustCompile(` ran (\d+(?:\.\d+)?),`)
	stageCheckout   = regexp.MustCompile(` checkout (\d+(?:\.\d+)?),`)
	lookupAndAnswer = regexp.MustCompile(`the session's lookup and the answer (\d+(?:\.\d+)?) ms`)
	exportTakes     = regexp.MustCompile("`git archive` into `tar -x` alone takes (\\d+(?:\\.\\d+)?) ms")
	writingTakes    = regexp.MustCompile(`writing the files into git (\d+(?:\.\d+)?) ms`)
	publishingTakes = regexp.MustCompile(`publishing them to the object store (\d+(?:\.\d+)?) ms`)
	ttydMeasured    = regexp.MustCompile(`ttyd (\d+(?:\.\d+)?) (ms|MB/s)`)
	ttydNotMeasured = regexp.MustCompile(`ttyd: not measured \([^)]+\)`)
	p99OfFloor      = regexp.MustCompile(`p99 (\d+(?:\.\d+)?) × the HTTP floor's`)
	// The disk bound's cost may come out below zero on a busy machine:
	// a difference, not a duration, so only its being there is checked.
	diskCostsCommand = regexp.MustCompile(`the disk bound costs ([+-]\d+(?:\.\d+)?) ms a command`)
	diskCostsFirst   = regexp.MustCompile(`([+-]\d+) ms a session's first`)
	// Differences of two medians, which the noise of a short run can turn
	// negative.
	signed = map[*regexp.Regexp]bool{lookupAndAnswer: true, diskCostsCommand: true, diskCostsFirst: true, execAddsKey: true, execAddsCommand: true}
)

const diskOffMeasure = "the same with the disk bound off"

// The Go build row holds a second session's build against a warm build on
// the host and the first session's, cold as every session's build was.
const goBuildMeasure = "second session's `go build ./...`"

var (
	hostWarmBuild     = regexp.MustCompile("warm `go build ./...` on the host (\\d+(?:\\.\\d+)?) ms")
	firstSessionBuild = regexp.MustCompile(`the first session's, cold as every session's was before, (\d+(?:\.\d+)?) ms`)
)

// checkTTYDShare wants a terminal row either to show ttyd's figure and
// judge against it, or to say why ttyd is not measured.
func checkTTYDShare(t *testing.T, measure, line string) {
	t.Helper()
	cells := strings.Split(strings.Trim(line, "| "), " | ")
	if len(cells) != 5 {
		t.Fatalf("%s: want 5 cells:\n%s", measure, line)
	}
	anchor, result := cells[2], cells[4]
	switch {
	case ttydMeasured.MatchString(anchor):
		if figure, _ := strconv.ParseFloat(ttydMeasured.FindStringSubmatch(anchor)[1], 64); figure <= 0 {
			t.Errorf("%s: ttyd's figure is not a measurement:\n%s", measure, line)
		}
		if !strings.Contains(result, "ttyd") || strings.Contains(result, "not judged") {
			t.Errorf("%s: ttyd measured but not judged against:\n%s", measure, line)
		}
	case ttydNotMeasured.MatchString(anchor):
		if !strings.Contains(result, "ttyd's share not judged") {
			t.Errorf("%s: ttyd not measured, yet the result does not say its share is unjudged:\n%s", measure, line)
		}
	default:
		t.Errorf("%s: the row neither measures ttyd nor says why not:\n%s", measure, line)
	}
}

func rowOf(table, measure string) string {
	for line := range strings.SplitSeq(table, "\n") {
		if strings.HasPrefix(line, "| "+measure) {
			return line
		}
	}
	return ""
}

// TestTTYDNotFoundSaysWhy: without ttyd on PATH, each way of not having it
// gives the table a reason a person can act on, and nothing is built.
func TestTTYDNotFoundSaysWhy(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	notSource := t.TempDir()
	source := t.TempDir()
	if err := os.WriteFile(filepath.Join(source, "CMakeLists.txt"), []byte("project(ttyd C)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ src, want string }{
		{"", "no source to build it from: give -ttyd-src or ATELIER_TTYD_SRC"},
		{notSource, notSource + " is not ttyd's source (no CMakeLists.txt)"},
		{source, "no cmake to build it from " + source},
	} {
		bin, why := findTTYD(tc.src, io.Discard)
		if bin != "" || !strings.Contains(why, tc.want) {
			t.Errorf("source %q: got %q, %q; want no binary and a reason with %q", tc.src, bin, why, tc.want)
		}
	}
}

// TestTTYDBuiltOnceIsReused: a binary already in the cache folder is used
// without building, so a second run does not pay for the build.
func TestTTYDBuiltOnceIsReused(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := ttydCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(dir, "ttyd")
	if err := os.WriteFile(cached, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The source folder is not even ttyd's, or not given: the cache
	// answers first.
	for _, src := range []string{t.TempDir(), ""} {
		if bin, why := findTTYD(src, io.Discard); bin != cached {
			t.Errorf("source %q: got %q (%s), want the cached %s", src, bin, why, cached)
		}
	}
}

func TestJudgeAndRounds(t *testing.T) {
	f := figure{0.003, 0.001, 0.002}
	if got := msFig(f); got != "2.00 ms (1.00–3.00)" {
		t.Errorf("msFig = %q", got)
	}
	if got := msFig(figure{0.25}); got != "250 ms" {
		t.Errorf("one round: msFig = %q, want no spread", got)
	}
	if got := judge("", atMost("p50", 0.0003, 0.0004, "0.4 ms"), atMost("p99", 0.003, 0.001, "2 × ttyd's")); got != "misses: p50 ≤ 0.4 ms; p99 3.0 × 2 × ttyd's" {
		t.Errorf("judge = %q", got)
	}
	if got := judge("", atMost("p50", 0.000401, 0.0004, "0.4 ms")); got != "misses: p50 1.00 × 0.4 ms" {
		t.Errorf("a near miss: judge = %q", got)
	}
	if got := judge("note", shareOf(50, 40, 1, "ttyd")); got != "met (1.25 of ttyd; note)" {
		t.Errorf("judge = %q", got)
	}
	if got := judge("", shareOf(84.8, 100, 0.85, "raw")); got != "misses: 0.848 of raw, short of 0.85" {
		t.Errorf("a near miss of a share: judge = %q", got)
	}
}
