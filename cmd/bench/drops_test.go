package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"atelier/testrig/flakynet"
)

// TestShortDrops types through a strand on Atelier, and on ttyd when it
// is found as TestShortBench finds it, so the drop measure keeps working
// as the pages change. Atelier's row is held to what its own drop test
// holds it to: every key delivered, each line run once, the same shell
// after, with the heartbeat it ships (15 s), which the drop test's short
// one cannot tell; and the terminal caught up, how soon being the
// measure's figure, not a bound (46.6 s under the whole test run's load,
// 15.8 s on a quieter machine). ttyd's row measures it or says why not.
func TestShortDrops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, since the embedded PostgreSQL runs as the postgres account")
	}
	table, err := runDrops([]networkDrop{{flakynet.Strand, 0}}, os.Getenv(ttydSrcEnv), os.Stderr)
	t.Log("\n" + table)
	if err != nil {
		t.Fatal(err)
	}
	at := dropCellsOf(t, table, "Atelier")
	var typed, delivered, once, twice, never int
	if _, err := fmt.Sscanf(at[2], "%d / %d", &typed, &delivered); err != nil || typed == 0 || delivered != typed {
		t.Errorf("Atelier: keys typed / delivered %q, want every key typed delivered", at[2])
	}
	if _, err := fmt.Sscanf(at[3], "%d / %d / %d", &once, &twice, &never); err != nil || once == 0 || twice+never != 0 {
		t.Errorf("Atelier: lines run once / twice or more / never %q, want each once", at[3])
	}
	if at[5] != "the same" {
		t.Errorf("Atelier: the shell after the drop is %q, want the same", at[5])
	}
	var caughtUp float64
	if _, err := fmt.Sscanf(at[7], "%f s after the strand", &caughtUp); err != nil {
		t.Errorf("Atelier: the last output %q, want it shown", at[7])
	}
	tt := dropCellsOf(t, table, "ttyd")
	if _, err := fmt.Sscanf(tt[2], "%d / %d", &typed, &delivered); err != nil && !strings.HasPrefix(tt[2], "not measured (") {
		t.Errorf("ttyd: %q neither measures it nor says why not", tt[2])
	}
}

// dropCellsOf is the cells of the drop table's row for terminal.
func dropCellsOf(t *testing.T, table, terminal string) []string {
	t.Helper()
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) == 8 && cells[1] == terminal {
			return cells
		}
	}
	t.Fatalf("no row for %s", terminal)
	return nil
}
