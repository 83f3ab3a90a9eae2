package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// embeddedRow is the row whose server runs on an embedded PostgreSQL of its
// own: the suite's server uses DATABASE_URL, whose PostgreSQL the suite runs
// and the server leaves alone.
const embeddedRow = "embedded PostgreSQL killed"

// embedded starts a second server from the suite's binary on a data folder
// of its own, with the embedded PostgreSQL (no DATABASE_URL) and its objects
// in that folder, and waits until it answers.
func (s *server) embedded() (*server, error) {
	dir, err := os.MkdirTemp("", "atelier-abuse-embedded-")
	if err != nil {
		return nil, err
	}
	e := &server{dir: dir, bin: s.bin}
	// The cluster runs as the postgres account, which must pass through
	// every parent of its folder.
	if err := os.Chmod(dir, 0o711); err != nil {
		e.stop()
		return nil, err
	}
	if err := os.Mkdir(e.data(), 0o711); err != nil {
		e.stop()
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.stop()
		return nil, err
	}
	e.addr = l.Addr().String()
	l.Close()
	e.base = "http://" + e.addr
	if e.logw, err = os.Create(filepath.Join(dir, "server.log")); err != nil {
		e.stop()
		return nil, err
	}
	// The last value of a variable wins.
	e.env = append(append([]string{}, s.env...), "ATELIER_DATA="+e.data(), "ATELIER_ADDR="+e.addr,
		"DATABASE_URL=", "ATELIER_S3_ENDPOINT=",
		// One instance alone, reached directly: no cluster, which would
		// need the shared ones, and no balancer to trust.
		"ATELIER_CLUSTER_SECRET=", "ATELIER_INTERNAL_URL=", "ATELIER_TRUSTED_PROXIES=")
	if err := e.launch(); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

func (s *server) data() string { return filepath.Join(s.dir, "data") }

// postmaster is the PID its embedded cluster's postmaster.pid names.
func (s *server) postmaster() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.data(), "postgres", "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// endCluster ends the embedded cluster if it still runs once its server
// has exited, as after a failed row.
func (s *server) endCluster() {
	if pid, err := s.postmaster(); err == nil && processState(pid) != "" && processState(pid) != "Z" {
		_ = syscall.Kill(pid, syscall.SIGQUIT)
	}
}

// parentOf is the parent of pid, -1 when it is gone.
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// embeddedKill takes the embedded PostgreSQL away from its server twice.
// First the server is killed (SIGKILL), which leaves the cluster running
// without it, and started again: it must stop that orphan and run the
// cluster as its own child. Then, under a client that saves an edit and
// reads it back every 50 ms, the postmaster is killed (SIGKILL): the
// server must start it again by itself; meanwhile every answer is a
// success or 503 database_unavailable within 5 s, a save succeeds again
// within 60 s of the kill, and every acknowledged save reads back.
func embeddedKill(s *server) (string, bool) {
	orphan, err := s.postmaster()
	if err != nil {
		return "the embedded cluster's postmaster: " + err.Error(), false
	}
	s.kill()
	if st := processState(orphan); st == "" || st == "Z" {
		return fmt.Sprintf("the postmaster %d died with its server; the row needs it orphaned", orphan), false
	}
	if err := s.launch(); err != nil {
		return "restart: " + err.Error(), false
	}
	adopted, err := s.postmaster()
	if err != nil {
		return "after the restart: " + err.Error(), false
	}
	if st := processState(orphan); adopted == orphan || (st != "" && st != "Z") || parentOf(adopted) != int(s.pid.Load()) {
		return fmt.Sprintf("after the restart the postmaster is %d (parent %d), the orphan %d is %q; want a new child of the server %d",
			adopted, parentOf(adopted), orphan, st, s.pid.Load()), false
	}

	c, err := signIn(s.base, "admin", adminPassword)
	if err != nil {
		return err.Error(), false
	}
	id, err := c.CreateProject("abuse-embedded")
	if err != nil {
		return err.Error(), false
	}
	base, err := c.openSession(id)
	if err != nil {
		return err.Error(), false
	}
	w := &editWriter{c: c, base: base, saved: map[string]string{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); w.run(stop) }()
	time.Sleep(time.Second)
	if err := syscall.Kill(adopted, syscall.SIGKILL); err != nil {
		close(stop)
		<-done
		return "kill the postmaster: " + err.Error(), false
	}
	killed := time.Now()
	// A save may still land on a backend of the killed postmaster; what
	// counts is one through the postmaster the server started again.
	var again int
	for time.Since(killed) < recoverWithin {
		if again, err = s.postmaster(); err == nil && again != adopted && parentOf(again) == int(s.pid.Load()) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	restarted := time.Now()
	recovered := w.waitSaved(restarted, recoverWithin)
	time.Sleep(time.Second)
	close(stop)
	<-done

	var why []string
	if again == adopted || parentOf(again) != int(s.pid.Load()) {
		why = append(why, fmt.Sprintf("within %s of the kill the postmaster is %d (parent %d, %v), want a new child of the server",
			recoverWithin, again, parentOf(again), err))
	} else if recovered < 0 {
		why = append(why, fmt.Sprintf("no save succeeded within %s of PostgreSQL's restart", recoverWithin))
	}
	why = append(why, w.problems()...)
	if lost := c.verifySaved(base, w.saved); lost != "" {
		why = append(why, lost)
	}
	detail := fmt.Sprintf("the orphan was stopped and started as the restarted server's child; after the postmaster's kill "+
		"it ran again in %s, %d saves kept, %d answered 503 database_unavailable (slowest %s), saves again %s after the restart",
		restarted.Sub(killed).Round(10*time.Millisecond), len(w.saved), w.unavailable.Load(),
		ms(time.Duration(w.slowest.Load())), recovered.Round(10*time.Millisecond))
	if len(why) > 0 {
		return detail + "; " + strings.Join(why, "; "), false
	}
	return detail, true
}

// measureEmbedded runs embeddedRow against a server of its own, measured
// as the other rows are.
func measureEmbedded(s *server, p99Bound time.Duration) row {
	const size = "server SIGKILLed, then its postmaster under saves and reads"
	e, err := s.embedded()
	if err != nil {
		return row{attack: embeddedRow, size: size, failed: true, result: "fail: " + err.Error()}
	}
	defer func() {
		// A cluster its server did not stop (it was killed, or failed
		// the row) would outlive the folder stop removes.
		e.terminate()
		e.endCluster()
		e.stop()
	}()
	r := e.measure(embeddedRow, size, p99Bound, true, true, func() (string, bool) { return embeddedKill(e) })
	if r.failed {
		r.result += " (the server's log: " + e.keepLog() + ")"
	}
	return r
}
