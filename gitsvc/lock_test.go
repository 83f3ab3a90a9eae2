package gitsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"atelier/testrig/wait"
)

func lockPath(r *Repo) string { return filepath.Join(r.GitDir, lockName) }

func assertLockFile(t *testing.T, r *Repo) {
	t.Helper()
	if _, err := os.Stat(lockPath(r)); err != nil {
		t.Errorf("lock file: %v", err)
	}
}

func TestExternalHolderMakesUsWaitThenBusy(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(time.Second))
	r, first := mustCreate(t, s, "p")
	dir := t.TempDir()
	stop := holdFlock(t, lockPath(r), "-x", 30*time.Second)

	calls := map[string]func() error{
		"writer": func() error { _, err := s.CommitTree(ctx, r, dir, []string{first}, "m"); return err },
		"reader": func() error { _, _, err := s.Head(ctx, r); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		took := time.Since(start)
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("%s: %v, want ErrBusy", name, err)
		}
		// Order, not a window of times: it gave up once its LockWait had
		// passed, and while the holder (for 30 s) still held the lock.
		if took < time.Second {
			t.Errorf("%s gave up after %s, before its 1 s LockWait", name, took)
		}
		if !heldElsewhere(t, lockPath(r)) {
			t.Errorf("%s gave up only once the holder had let go", name)
		}
	}
	stop()
	if _, err := s.CommitTree(ctx, r, dir, []string{first}, "m"); err != nil {
		t.Fatalf("after the holder left: %v", err)
	}
	assertLockFile(t, r)
	if readers, writer, queued := s.locks.state(r.GitDir); readers+queued != 0 || writer {
		t.Errorf("reservation left: %d readers, writer %v, %d queued", readers, writer, queued)
	}
}

// heldElsewhere says whether another process holds the lock file name.
func heldElsewhere(t *testing.T, name string) bool {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err != nil && !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatal(err)
	}
	return err != nil
}

func TestWaiterProceedsWhenExternalHolderLeaves(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(10*time.Second))
	r, first := mustCreate(t, s, "p")
	holdFlock(t, lockPath(r), "-x", 500*time.Millisecond)
	start := time.Now()
	if _, err := s.CommitTree(ctx, r, t.TempDir(), []string{first}, "m"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("committed after %s while another process held the lock", took)
	}
	assertLockFile(t, r)
}

// Every method takes the lock its work needs: a shared holder lets reads
// through and stops writes; an exclusive holder stops both.
func TestMethodsTakeTheRightLock(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(300*time.Millisecond))
	r, first := mustCreate(t, s, "p")
	src := newRepo(t)
	local, err := s.OpenLocal(ctx, src)
	if err != nil {
		t.Fatal(err)
	}

	type call struct {
		name  string
		write bool
		repo  *Repo
		do    func() error
	}
	calls := []call{
		{"Head", false, r, func() error { _, _, err := s.Head(ctx, r); return err }},
		{"ResolveCommit", false, r, func() error { _, err := s.ResolveCommit(ctx, r, "main"); return err }},
		{"ListAll", false, r, func() error { _, _, err := s.ListAll(ctx, r, first); return err }},
		{"List", false, r, func() error { _, err := s.List(ctx, r, first, ""); return err }},
		{"ReadBlob", false, r, func() error {
			_, _, err := s.ReadBlob(ctx, r, first, "x")
			if errors.Is(err, ErrNotFound) {
				return nil // ran, under the lock
			}
			return err
		}},
		{"OpenBatch", false, r, func() error {
			b, err := s.OpenBatch(ctx, r)
			if err == nil {
				err = b.Close()
			}
			return err
		}},
		{"Remotes", false, local, func() error { _, err := s.Remotes(ctx, src); return err }},
		{"CommitTree", true, r, func() error { _, err := s.CommitTree(ctx, r, t.TempDir(), []string{first}, "m"); return err }},
		{"CommitWithParents", true, r, func() error {
			_, err := s.CommitWithParents(ctx, r, emptyTree, []string{first}, "m")
			return err
		}},
		{"BuildTree", true, r, func() error {
			_, err := s.BuildTree(ctx, r, func(b *TreeBuilder) error { return b.Link("l", ".") })
			return err
		}},
		{"FetchInto", true, r, func() error { _, err := s.FetchInto(ctx, r, src, true); return err }},
		{"RemoveRepo", true, r, func() error { return s.RemoveRepo(ctx, "p") }},
	}
	for _, mode := range []string{"-s", "-x"} {
		for _, c := range calls {
			stop := holdFlock(t, lockPath(c.repo), mode, 30*time.Second)
			err := c.do()
			stop()
			wantBusy := mode == "-x" || c.write
			if wantBusy && !errors.Is(err, ErrBusy) {
				t.Errorf("flock %s held elsewhere: %s = %v, want ErrBusy", mode, c.name, err)
			}
			if !wantBusy && err != nil {
				t.Errorf("flock %s held elsewhere: %s = %v, want success", mode, c.name, err)
			}
		}
	}
	assertLockFile(t, r)
	assertLockFile(t, local)
}

func TestReadersShare(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	rel1, err := s.Lock(ctx, r.GitDir, false)
	if err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rel2, err := s.Lock(quick, r.GitDir, false)
	if err != nil {
		t.Fatalf("second reader waited: %v", err)
	}
	if readers, _, _ := s.locks.state(r.GitDir); readers != 2 {
		t.Errorf("%d readers, want 2", readers)
	}
	// Other processes see the shared lock: they may share it, not take it.
	if !flockFree(t, lockPath(r), "-s") {
		t.Error("another process could not share the readers' lock")
	}
	if flockFree(t, lockPath(r), "-x") {
		t.Error("another process could take the lock exclusively while we read")
	}
	rel1()
	rel2()
	rel2() // releasing twice is harmless
	if !flockFree(t, lockPath(r), "-x") {
		t.Error("the lock is still held after release")
	}
	assertLockFile(t, r)
}

func TestWriterIsExclusive(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	rel, err := s.Lock(ctx, r.GitDir, true)
	if err != nil {
		t.Fatal(err)
	}
	if flockFree(t, lockPath(r), "-s") {
		t.Error("another process could read while we write")
	}
	quick, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.Lock(quick, r.GitDir, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a reader got in beside the writer: %v", err)
	}
	rel()
	assertLockFile(t, r)
}

func TestQueuedWriterIsNotOvertaken(t *testing.T) {
	ctx := testContext(t)
	s := newService(t)
	r, _ := mustCreate(t, s, "p")
	key := r.GitDir

	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	noted := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}

	releaseA, err := s.Lock(ctx, key, false) // the long reader
	if err != nil {
		t.Fatal(err)
	}
	writerDone := make(chan error, 1)
	go func() {
		rel, err := s.Lock(ctx, key, true)
		if err == nil {
			note("writer")
			// Whoever was queued behind the writer is queued still.
			if readers, _, queued := s.locks.state(key); readers != 0 || queued != 1 {
				note(fmt.Sprintf("%d readers and %d queued beside the writer", readers, queued))
			}
			note("writer done")
			rel()
		}
		writerDone <- err
	}()
	wait.For(t, wait.Short, "the writer to queue", func() bool { _, _, q := s.locks.state(key); return q == 1 })

	readerDone := make(chan error, 1)
	go func() {
		rel, err := s.Lock(ctx, key, false)
		if err == nil {
			note("late reader")
			rel()
		}
		readerDone <- err
	}()
	wait.For(t, wait.Short, "the late reader to queue", func() bool { _, _, q := s.locks.state(key); return q == 2 })
	if readers, writer, _ := s.locks.state(key); readers != 1 || writer {
		t.Fatalf("%d readers and a writer (%v) hold the lock while the writer and the late reader queue, want the first reader alone", readers, writer)
	}
	if got := noted(); len(got) != 0 {
		t.Fatalf("%v got in while the first reader held the lock", got)
	}

	releaseA()
	for _, ch := range []chan error{writerDone, readerDone} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if got, want := noted(), []string{"writer", "writer done", "late reader"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	assertLockFile(t, r)
}

func TestCancelFreesTheWaiter(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(time.Minute))
	r, _ := mustCreate(t, s, "p")
	key := r.GitDir

	releaseA, err := s.Lock(ctx, key, false)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancelWriter := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	go func() {
		rel, err := s.Lock(wctx, key, true)
		if err == nil {
			rel()
		}
		writerDone <- err
	}()
	wait.For(t, wait.Short, "the writer to queue", func() bool { _, _, q := s.locks.state(key); return q == 1 })
	readerDone := make(chan func(), 1)
	go func() {
		rel, err := s.Lock(ctx, key, false)
		if err != nil {
			t.Error(err)
			rel = func() {}
		}
		readerDone <- rel
	}()
	wait.For(t, wait.Short, "the reader to queue", func() bool { _, _, q := s.locks.state(key); return q == 2 })

	start := time.Now()
	cancelWriter()
	select {
	case err := <-writerDone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("writer: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cancelling did not free the writer")
	}
	// The reader was queued only behind the writer: with the writer gone it
	// joins the first reader at once.
	select {
	case rel := <-readerDone:
		rel()
	case <-time.After(2 * time.Second):
		t.Fatal("the reader stayed stuck behind a cancelled writer")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s", took)
	}
	releaseA()
	s.locks.mu.Lock()
	gates := len(s.locks.gates)
	s.locks.mu.Unlock()
	if gates != 0 {
		t.Errorf("%d reservations left behind", gates)
	}
	assertLockFile(t, r)
}

func TestCancelWhileWaitingForAnotherProcess(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(time.Minute))
	r, _ := mustCreate(t, s, "p")
	holdFlock(t, lockPath(r), "-x", 30*time.Second)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Lock(cctx, r.GitDir, false)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("returned after %s", took)
	}
	// The in-process half was given back.
	if readers, writer, queued := s.locks.state(r.GitDir); readers+queued != 0 || writer {
		t.Errorf("reservation left: %d readers, writer %v, %d queued", readers, writer, queued)
	}
	assertLockFile(t, r)
}

func TestHoldCoversNestedCalls(t *testing.T) {
	ctx := testContext(t)
	s := newService(t, withLockWait(time.Second))
	r, first := mustCreate(t, s, "p")

	hctx, release, err := s.Hold(ctx, r.GitDir, true)
	if err != nil {
		t.Fatal(err)
	}
	head, _, err := s.Head(hctx, r)
	if err != nil || head != first {
		t.Fatalf("Head under Hold = %s, %v", head, err)
	}
	if _, err := s.CommitTree(hctx, r, t.TempDir(), []string{first}, "m"); err != nil {
		t.Fatalf("CommitTree under Hold: %v", err)
	}
	// Without the context, the lock is taken: the write hold excludes.
	if _, _, err := s.Head(ctx, r); !errors.Is(err, ErrBusy) {
		t.Errorf("Head beside the hold: %v, want ErrBusy", err)
	}
	release()
	if _, _, err := s.Head(hctx, r); err != nil {
		t.Errorf("Head with a released hold: %v", err)
	}

	rctx, release, err := s.Hold(ctx, r.GitDir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := s.CommitWithParents(rctx, r, emptyTree, []string{first}, "m"); err == nil || errors.Is(err, ErrBusy) {
		t.Errorf("writing under a read hold: %v, want an immediate refusal", err)
	}
}

// state reports a repository's reservation.
func (rs *reservations) state(key string) (readers int, writer bool, queued int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.gates[key]; g != nil {
		return g.readers, g.writer, len(g.queue)
	}
	return 0, false, 0
}
