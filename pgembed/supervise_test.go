package pgembed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"atelier/testrig/wait"
)

// recoverWithin bounds how long a supervised cluster may take to serve
// again after its postmaster was killed: the first restart waits
// restartMin, then the killed postmaster's children must exit and the new
// one recover from the crash.
const recoverWithin = wait.Span(60 * time.Second)

func supervisedConfig(t *testing.T, dir string) Config {
	cfg := testConfig(t, dir)
	cfg.Supervise = true
	return cfg
}

// parentPID is the parent of process pid, from /proc.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// waitServing waits until a query on dsn succeeds, and answers it.
func waitServing(t *testing.T, dsn, sql string, within wait.Span) string {
	t.Helper()
	var got string
	wait.ForNil(t, within, "an answer to "+sql, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer closeConn(conn)
		return conn.QueryRow(ctx, sql).Scan(&got)
	})
	return got
}

// A supervised cluster whose postmaster is killed is started again by the
// supervisor, as our child, with its data, and queries succeed again on the
// same DSN; Stop then ends it for good.
func TestSupervisorStartsAKilledPostmasterAgain(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	c := startCluster(t, supervisedConfig(t, dir))
	dsn := c.DSN("atelier")
	execSQL(t, dsn, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before kill')")

	for round := range 2 {
		killed := c.current()
		if err := syscall.Kill(killed.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if got := waitServing(t, dsn, "SELECT v FROM kept", recoverWithin); got != "before kill" {
			t.Fatalf("round %d: kept = %q", round, got)
		}
		// The supervisor records the new postmaster once it is ready,
		// a moment after it answers.
		wait.For(t, recoverWithin, "the supervisor to record the new postmaster", func() bool { return c.current() != killed })
		now := c.current()
		if now == killed || now.pid == killed.pid || !c.Owned() {
			t.Fatalf("round %d: postmaster %d (owned %v) after killing %d", round, now.pid, c.Owned(), killed.pid)
		}
		if ppid := parentPID(t, now.pid); ppid != os.Getpid() {
			t.Fatalf("round %d: the new postmaster's parent is %d, want this process %d", round, ppid, os.Getpid())
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil || !strings.Contains(string(log), "database system was interrupted") {
		t.Errorf("the log shows no recovery after the kill (%v):\n%s", err, log)
	}

	pid := c.current().pid
	stopCluster(t, c)
	dataDir := filepath.Join(dir, dataName)
	// Nothing starts it again after Stop: the supervisor, the only one
	// that would, has ended by the time Stop returns.
	select {
	case <-c.supervisorDone:
	default:
		t.Fatal("the supervisor still runs after Stop")
	}
	if servesDataDir(pid, dataDir) || len(leftovers(dataDir)) > 0 {
		t.Fatalf("PostgreSQL runs after Stop: postmaster %d, processes %v", pid, leftovers(dataDir))
	}
}

// A postmaster left running by a process of ours that died (an orphan, as
// a killed server leaves) is used as it is by an unsupervised Start, such
// as `user add`, but a supervised one stops it with a fast shutdown and
// starts it again as its own child, with its data.
func TestSupervisedStartTakesOverAnOrphan(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	dataDir := filepath.Join(dir, dataName)
	child, orphan := startChild(t, dir, true)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if !servesDataDir(orphan, dataDir) {
		t.Fatalf("the postmaster %d died with its parent; the test needs it orphaned", orphan)
	}
	execSQL(t, dsn(dir, "atelier"), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('orphaned')")

	plain := startCluster(t, testConfig(t, dir))
	if plain.Owned() || plain.current().pid != orphan {
		t.Fatalf("an unsupervised Start beside the orphan: owned %v, pid %d, want attached to %d", plain.Owned(), plain.current().pid, orphan)
	}
	stopCluster(t, plain)

	c := startCluster(t, supervisedConfig(t, dir))
	pid := c.current().pid
	if !c.Owned() || pid == orphan {
		t.Fatalf("the supervised Start: owned %v, pid %d; want its own postmaster, not the orphan %d", c.Owned(), pid, orphan)
	}
	if servesDataDir(orphan, dataDir) {
		t.Fatalf("the orphan %d still runs", orphan)
	}
	if ppid := parentPID(t, pid); ppid != os.Getpid() {
		t.Fatalf("the postmaster's parent is %d, want this process %d", ppid, os.Getpid())
	}
	if got := queryString(t, c.DSN("atelier"), "SELECT v FROM kept"); got != "orphaned" {
		t.Errorf("kept = %q", got)
	}
	// Stopped cleanly: the orphan wrote its shutdown checkpoint, and the
	// new postmaster had nothing to recover.
	log, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil || !strings.Contains(string(log), "received fast shutdown request") ||
		strings.Contains(string(log), "database system was interrupted") {
		t.Errorf("the log shows no clean stop of the orphan (%v):\n%s", err, log)
	}
}

// A supervised Start beside a cluster that a live process of ours runs
// (a `user add` that started it) attaches to it, and when that process
// stops it, starts it again as its own.
func TestSupervisorTakesOverWhenTheOwnerStops(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	owner := startCluster(t, testConfig(t, dir))
	c := startCluster(t, supervisedConfig(t, dir))
	if c.Owned() || c.current().pid != owner.current().pid {
		t.Fatalf("the supervised Start beside a live owner: owned %v, pid %d, want attached to %d",
			c.Owned(), c.current().pid, owner.current().pid)
	}
	first := owner.current().pid
	stopCluster(t, owner)
	waitServing(t, c.DSN("atelier"), "SELECT 'back'", recoverWithin)
	wait.ForNil(t, recoverWithin, "the supervisor to start the cluster as its own", func() error {
		if !c.Owned() {
			return fmt.Errorf("pid %d (first %d) is not its own", c.current().pid, first)
		}
		return nil
	})
	if ppid := parentPID(t, c.current().pid); ppid != os.Getpid() {
		t.Fatalf("the postmaster's parent is %d, want this process %d", ppid, os.Getpid())
	}
}
