package terminal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
)

// openFake opens a terminal on a cheap stand-in for a shell: no process,
// only a held copy of the tty, and a Wait that returns once killed.
func openFake(m *Manager, account string) (*Terminal, error) {
	var p *fakeProcess
	start := Starter(func(tty *os.File) (Process, error) {
		dup, err := os.OpenFile(tty.Name(), os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			return nil, err
		}
		p = &fakeProcess{tty: dup, killed: make(chan struct{})}
		return p, nil
	})
	return m.Open(account, start, Options{Kill: func() error { return p.kill() }})
}

type fakeProcess struct {
	tty    *os.File
	once   sync.Once
	killed chan struct{}
}

func (p *fakeProcess) Pid() int { return 0 }

func (p *fakeProcess) Wait() (Exit, error) {
	<-p.killed
	return Exit{Code: -1, Signal: "SIGKILL"}, nil
}

func (p *fakeProcess) kill() error {
	p.once.Do(func() {
		p.tty.Close()
		close(p.killed)
	})
	return nil
}

func checkUsage(t *testing.T, m *Manager, account string, wantAccount, wantInstance int) {
	t.Helper()
	a, i := m.Usage(account)
	if a != wantAccount || i != wantInstance {
		t.Fatalf("usage of %s: %d of the account's, %d of the instance's; want %d, %d", account, a, i, wantAccount, wantInstance)
	}
}

// TestShellLimits with small limits on real shells: the account's and the
// instance's, and a closed shell frees its slot.
func TestShellLimits(t *testing.T) {
	m := newManager(t, Config{AccountShells: 2, InstanceShells: 3})
	open := func(account string) (*Terminal, error) {
		term, err := m.Open(account, bash("exec sleep 60"), Options{})
		if err == nil {
			t.Cleanup(func() { term.Close() })
		}
		return term, err
	}
	ann1, err := open("ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open("ann"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("ann"); !errors.Is(err, ErrAccountShells) {
		t.Fatalf("ann's third shell: %v, want ErrAccountShells", err)
	}
	if _, err := open("bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("cy"); !errors.Is(err, ErrInstanceShells) {
		t.Fatalf("the instance's fourth shell: %v, want ErrInstanceShells", err)
	}
	checkUsage(t, m, "ann", 2, 3)
	if err := ann1.Close(); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, m, "ann", 1, 2)
	if _, err := m.Get(ann1.ID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("closed terminal still found: %v", err)
	}
	if _, err := open("cy"); err != nil {
		t.Fatalf("after a close: %v", err)
	}
}

// TestShellLimitsDefaults: 4 per account and 32 on the instance.
func TestShellLimitsDefaults(t *testing.T) {
	m := newManager(t, Config{})
	for a := range 8 {
		for range 4 {
			if _, err := openFake(m, fmt.Sprint("user", a)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := openFake(m, "user0"); !errors.Is(err, ErrAccountShells) {
		t.Fatalf("fifth shell of an account: %v, want ErrAccountShells", err)
	}
	if _, err := openFake(m, "user8"); !errors.Is(err, ErrInstanceShells) {
		t.Fatalf("33rd shell: %v, want ErrInstanceShells", err)
	}
	checkUsage(t, m, "user0", 4, 32)
	running := m.Running()
	if n := len(running); n != 32 {
		t.Errorf("%d terminals running, want 32", n)
	}
	for _, term := range running {
		if term.Account() == "user3" {
			if err := term.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkUsage(t, m, "user3", 0, 28)
	if n := len(m.Running()); n != 28 {
		t.Errorf("%d terminals running after closing user3's, want 28", n)
	}
}

// TestFailedOpenReleasesSlots: a starter error, a bad size, and a slot
// given back unused all leave the counts as they were.
func TestFailedOpenReleasesSlots(t *testing.T) {
	m := newManager(t, Config{AccountShells: 1, InstanceShells: 1})
	boom := errors.New("sandbox says no")
	failing := Starter(func(*os.File) (Process, error) { return nil, boom })
	for range 3 {
		if _, err := m.Open("ann", failing, Options{}); !errors.Is(err, boom) {
			t.Fatalf("open with a failing starter: %v", err)
		}
		checkUsage(t, m, "ann", 0, 0)
	}
	if _, err := m.Open("ann", bash("true"), Options{Cols: 1001, Rows: 10}); !errors.Is(err, ErrBadSize) {
		t.Fatalf("1001 columns: %v, want ErrBadSize", err)
	}
	checkUsage(t, m, "ann", 0, 0)

	// Reserve holds the slot before anything is prepared.
	s, err := m.Reserve("ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve("bob"); !errors.Is(err, ErrInstanceShells) {
		t.Fatalf("while ann holds a reservation: %v", err)
	}
	s.Release()
	s.Release()
	checkUsage(t, m, "ann", 0, 0)
	if _, err := m.OpenWith(s, bash("true"), Options{}); !errors.Is(err, ErrSlotUsed) {
		t.Fatalf("OpenWith a released slot: %v, want ErrSlotUsed", err)
	}

	// Once a terminal owns the slot, Release leaves it alone, and the
	// shell's end frees it while the terminal stays for its last output.
	s, _ = m.Reserve("ann")
	term, err := m.OpenWith(s, bash("exit 0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	<-term.Done()
	checkUsage(t, m, "ann", 0, 0)
	if got, err := m.Get(term.ID()); err != nil || got != term {
		t.Fatalf("ended terminal: %v", err)
	}
	if n := len(m.Running()); n != 0 {
		t.Errorf("an ended terminal counts as running (%d)", n)
	}
	if err := term.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(term.ID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("closed terminal still found: %v", err)
	}
}

// TestEndedTerminalsAreBounded: ended terminals are kept for their output
// only up to KeepEnded, oldest out first.
func TestEndedTerminalsAreBounded(t *testing.T) {
	m := newManager(t, Config{KeepEnded: 2})
	var ids []string
	for range 3 {
		term, err := m.Open("ann", bash("exit 0"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		<-term.Done() // closed once the manager counts it ended
		ids = append(ids, term.ID())
	}
	if _, err := m.Get(ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("oldest ended terminal kept: %v", err)
	}
	for _, id := range ids[1:] {
		if _, err := m.Get(id); err != nil {
			t.Errorf("a recent ended terminal is gone: %v", err)
		}
	}
}

// TestTagIsKept: a terminal hands back the tag it was opened with, so its
// opener finds its own terminals through the Manager alone.
func TestTagIsKept(t *testing.T) {
	m := newManager(t, Config{})
	type owner struct{ session string }
	tag := &owner{session: "s1"}
	term, err := m.Open("ann", bash("exec sleep 60"), Options{Tag: tag})
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.Open("ann", bash("exec sleep 60"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var found []*Terminal
	for _, r := range m.Running() {
		if o, ok := r.Tag().(*owner); ok && o.session == "s1" {
			found = append(found, r)
		}
	}
	if len(found) != 1 || found[0] != term {
		t.Fatalf("terminals tagged s1: %v, want just %s", found, term.ID())
	}
	if other.Tag() != nil {
		t.Errorf("untagged terminal has tag %v", other.Tag())
	}
}
