package terminal

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// readChunk is the reader's buffer. A PTY master hands out at most one
// line-discipline buffer (4 KiB) per read, so more would sit unused.
const readChunk = 16 << 10

// minRing keeps the high- and low-water marks meaningful next to readChunk.
const minRing = 64 << 10

// Config holds the limits of a Manager; zero fields take the defaults.
type Config struct {
	AccountShells  int // running shells per account here (the leases bound them on all instances); 4
	InstanceShells int // running shells on this instance; 32
	RingBytes      int // output kept per terminal for replay; 1 MiB, at least 64 KiB
	InputBytes     int // input queued per terminal; 2 MiB, at least 1 MiB
	Viewers        int // output streams attached to one terminal at once; 8

	// While the viewer furthest ahead has more than HighWater bytes
	// unsent, the shell's output pauses until it is at LowWater or below.
	// Defaults: half and a quarter of RingBytes.
	HighWater, LowWater int

	EventBytes   int           // raw bytes in one text or out event at most; 32 KiB, at least a character's 4
	Heartbeat    time.Duration // a beat event on an idle stream; 15 s
	WriteTimeout time.Duration // a viewer whose write stalls this long is dropped; 5 s
	ExitGrace    time.Duration // how long output may trickle in after the shell ends; 2 s
	KeepEnded    int           // ended terminals kept for their last output; InstanceShells
}

// withDefaults fills zero fields and brings the others into range.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.AccountShells, 4)
	def(&c.InstanceShells, 32)
	def(&c.Viewers, 8)
	def(&c.RingBytes, 1<<20)
	c.RingBytes = max(c.RingBytes, minRing)
	def(&c.InputBytes, 2<<20)
	c.InputBytes = max(c.InputBytes, 1<<20)
	def(&c.HighWater, c.RingBytes/2)
	c.HighWater = min(c.HighWater, c.RingBytes-readChunk)
	def(&c.LowWater, c.RingBytes/4)
	c.LowWater = min(c.LowWater, c.HighWater)
	def(&c.EventBytes, 32<<10)
	c.EventBytes = max(c.EventBytes, utf8.UTFMax) // a character is never split
	defDur(&c.Heartbeat, 15*time.Second)
	defDur(&c.WriteTimeout, 5*time.Second)
	defDur(&c.ExitGrace, 2*time.Second)
	def(&c.KeepEnded, c.InstanceShells)
	return c
}

// Manager runs the terminals of one instance and holds their limits. Every
// terminal is reached through it by id.
type Manager struct {
	cfg Config

	mu        sync.Mutex
	running   int            // reserved slots on the instance
	byAccount map[string]int // reserved slots per account
	terms     map[string]*Terminal
	ended     []*Terminal // oldest first, at most cfg.KeepEnded
	closed    bool
}

// NewManager returns a Manager with cfg's limits.
func NewManager(cfg Config) *Manager {
	return &Manager{
		cfg:       cfg.withDefaults(),
		byAccount: make(map[string]int),
		terms:     make(map[string]*Terminal),
	}
}

// Config is the Manager's configuration with its defaults filled in.
func (m *Manager) Config() Config { return m.cfg }

// Slot is one reserved shell: it counts against its account and the
// instance from Reserve until Release, or, once OpenWith has used it, until
// that terminal's shell ends.
type Slot struct {
	m       *Manager
	account string
	id      string    // of the terminal it is for
	state   slotState // guarded by m.mu
}

// ID is the id the terminal opened in the slot will have, so the opener can
// record the shell before it starts.
func (s *Slot) ID() string { return s.id }

type slotState int

const (
	slotReserved slotState = iota
	slotUsed               // a terminal owns it
	slotReleased
)

// Reserve takes a shell slot for account, or fails with ErrAccountShells or
// ErrInstanceShells. Call it before anything else of an open (reading the
// request, preparing the sandbox), so a flood of opens is refused cheaply,
// and defer Release: it does nothing once OpenWith has used the slot.
func (m *Manager) Reserve(account string) (*Slot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, ErrClosed
	case m.byAccount[account] >= m.cfg.AccountShells:
		return nil, ErrAccountShells
	case m.running >= m.cfg.InstanceShells:
		return nil, ErrInstanceShells
	}
	m.byAccount[account]++
	m.running++
	return &Slot{m: m, account: account, id: newID()}, nil
}

// Release gives back a slot that no terminal uses. It is safe to call more
// than once and after OpenWith.
func (s *Slot) Release() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.state == slotReserved {
		s.m.releaseLocked(s)
	}
}

func (m *Manager) releaseLocked(s *Slot) {
	s.state = slotReleased
	m.running--
	if m.byAccount[s.account]--; m.byAccount[s.account] == 0 {
		delete(m.byAccount, s.account)
	}
}

// Open reserves a slot for account and opens a terminal in it.
func (m *Manager) Open(account string, launch Launcher, opts Options) (*Terminal, error) {
	s, err := m.Reserve(account)
	if err != nil {
		return nil, err
	}
	return m.OpenWith(s, launch, opts)
}

// OpenWith starts a shell in a reserved slot through launch. On failure
// the slot is released.
func (m *Manager) OpenWith(s *Slot, launch Launcher, opts Options) (*Terminal, error) {
	if s == nil || s.m != m {
		return nil, ErrSlotUsed
	}
	m.mu.Lock()
	if s.state != slotReserved {
		m.mu.Unlock()
		return nil, ErrSlotUsed
	}
	s.state = slotUsed
	m.mu.Unlock()

	t, err := open(s.id, s.account, m.cfg, launch, opts)
	if err != nil {
		m.mu.Lock()
		m.releaseLocked(s)
		m.mu.Unlock()
		return nil, err
	}
	t.mgr, t.slot = m, s
	m.mu.Lock()
	if m.closed {
		// Close ran meanwhile and did not see this terminal: end it here.
		m.mu.Unlock()
		t.run()
		t.Close()
		return nil, ErrClosed
	}
	m.terms[t.id] = t
	m.mu.Unlock()
	t.run()
	return t, nil
}

// shellEnded runs when t's shell has ended: its slot frees at once. Unless
// it was closed, the terminal stays findable for its last output and exit
// status until it is closed or pushed out by newer ended terminals.
func (m *Manager) shellEnded(t *Terminal, closing bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(t.slot)
	if m.terms[t.id] != t {
		return
	}
	if closing {
		delete(m.terms, t.id)
		return
	}
	m.ended = append(m.ended, t)
	if len(m.ended) > m.cfg.KeepEnded {
		delete(m.terms, m.ended[0].id)
		m.ended = slices.Delete(m.ended, 0, 1)
	}
}

// forget drops t from the Manager.
func (m *Manager) forget(t *Terminal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.terms[t.id] == t {
		delete(m.terms, t.id)
	}
	m.ended = slices.DeleteFunc(m.ended, func(e *Terminal) bool { return e == t })
}

// Get returns the terminal with id, whoever it belongs to.
func (m *Manager) Get(id string) (*Terminal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.terms[id]
	if !ok {
		return nil, ErrNotFound
	}
	return t, nil
}

// Running returns the terminals whose shells have not ended, oldest first.
func (m *Manager) Running() []*Terminal {
	return m.filter((*Terminal).running)
}

// RunningCount is how many terminals' shells have not ended.
func (m *Manager) RunningCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, t := range m.terms {
		if t.running() {
			n++
		}
	}
	return n
}

func (m *Manager) filter(keep func(*Terminal) bool) []*Terminal {
	m.mu.Lock()
	var ts []*Terminal
	for _, t := range m.terms {
		if keep(t) {
			ts = append(ts, t)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(ts, func(a, b *Terminal) int { return a.opened.Compare(b.opened) })
	return ts
}

// Usage is how many slots account holds and how many the instance does.
func (m *Manager) Usage(account string) (accountShells, instanceShells int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byAccount[account], m.running
}

// Slots is how many shell slots each account holds and how many the
// instance does.
func (m *Manager) Slots() (byAccount map[string]int, instance int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.byAccount), m.running
}

// Close closes every terminal and refuses new ones; for server shutdown.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, t := range m.filter(func(*Terminal) bool { return true }) {
		wg.Go(func() {
			if err := t.Close(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
