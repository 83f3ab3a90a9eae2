package terminal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// openFake opens a terminal on a cheap stand-in for a shell: no process,
// only a held copy of the tty, and a Wait that returns once killed.
func openFake(m *Manager, account string) (*Terminal, error) {
	var p *fakeProcess
	start := func(tty *os.File) (Process, error) {
		dup, err := os.OpenFile(tty.Name(), os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			return nil, err
		}
		p = &fakeProcess{tty: dup, killed: make(chan struct{})}
		return p, nil
	}
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
	if err := m.CloseTerminal(ann1.ID()); err != nil {
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
	if n := len(m.List("user3")); n != 4 {
		t.Errorf("user3 has %d terminals listed, want 4", n)
	}
	if n := len(m.All()); n != 32 {
		t.Errorf("%d terminals listed, want 32", n)
	}
	if err := m.CloseAccount("user3"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, m, "user3", 0, 28)
}

// TestFailedOpenReleasesSlots: a starter error, a bad size, and a slot
// given back unused all leave the counts as they were.
func TestFailedOpenReleasesSlots(t *testing.T) {
	m := newManager(t, Config{AccountShells: 1, InstanceShells: 1})
	boom := errors.New("sandbox says no")
	failing := func(*os.File) (Process, error) { return nil, boom }
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
	if got, err := m.Find("ann", term.ID()); err != nil || got != term {
		t.Fatalf("ended terminal: %v", err)
	}
	if _, err := m.Find("bob", term.ID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob finds ann's terminal: %v", err)
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
		<-term.Done()
		ids = append(ids, term.ID())
		time.Sleep(time.Millisecond)
	}
	if _, err := m.Get(ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("oldest ended terminal kept: %v", err)
	}
	if ts := m.List("ann"); len(ts) != 2 || ts[0].ID() != ids[1] || ts[1].ID() != ids[2] {
		t.Errorf("listed %d terminals, want the last two", len(ts))
	}
}
