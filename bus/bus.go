// Package bus carries small messages between Atelier's instances: what one
// publishes, every instance's subscribers receive, its own included. It
// keeps nothing and promises no delivery: what it promises is that a loss
// is never silent. Each subscriber has a bounded queue; a message that
// finds it full is dropped for that subscriber, and a listener that lost
// its connection may have missed messages for everyone: either way the
// subscribers concerned are told of a gap, and re-read what they show from
// the database, where the truth lives.
//
// Bus is the interface; Postgres, over LISTEN/NOTIFY, is its one
// implementation, so running several instances needs no service beyond
// the database they already share. Another broker can take its place
// behind the same interface.
package bus

import (
	"context"
	"errors"
	"sync"
)

// Bus publishes messages to every instance's subscribers.
type Bus interface {
	// Publish sends payload on topic to the subscribers of every instance.
	// A nil error says the broker took it, not that anyone received it.
	Publish(ctx context.Context, topic string, payload []byte) error
	// Subscribe starts a subscription to the topics; it receives what is
	// published from then on.
	Subscribe(topics ...string) (*Subscription, error)
	// Close ends every subscription (their Messages channels close) and
	// refuses new ones.
	Close() error
}

// Message is one publication as a subscriber receives it.
type Message struct {
	Topic   string
	Payload []byte
}

var (
	// ErrClosed refuses a subscription or a publication once the bus is
	// closed.
	ErrClosed = errors.New("bus: closed")
	// ErrTooLarge refuses a payload over MaxPayload: the publisher sends
	// what names the data (an id) instead, and receivers read it.
	ErrTooLarge = errors.New("bus: payload too large")
	// ErrBadMessage refuses a topic or payload the bus cannot carry as
	// it is (see Publish).
	ErrBadMessage = errors.New("bus: topic or payload not carried")
)

// MaxPayload is the most a payload and its topic may weigh together.
// PostgreSQL refuses a notification of 8000 bytes or more; this leaves
// room for the framing and for a broker with a tighter bound.
const MaxPayload = 7000

// Subscription is one subscriber: a bounded queue of messages, and a
// signal for the messages it will never get.
type Subscription struct {
	topics map[string]bool
	queue  chan Message
	gaps   chan struct{}
	fan    *fanout
}

// Messages delivers the subscription's messages in the order the bus
// received them. It is closed when the subscription or the bus is.
func (s *Subscription) Messages() <-chan Message { return s.queue }

// Gaps receives a value when messages may have been lost since the last
// one it gave (the queue was full, or the bus lost its broker for a while):
// the subscriber should read afresh what it shows. Several gaps before the
// subscriber looks come as one.
func (s *Subscription) Gaps() <-chan struct{} { return s.gaps }

// Close ends the subscription; its Messages channel closes.
func (s *Subscription) Close() { s.fan.remove(s) }

func (s *Subscription) gap() {
	select {
	case s.gaps <- struct{}{}:
	default: // one is pending already; it says as much
	}
}

// fanout hands each message to the subscribers of its topic without ever
// waiting for one.
type fanout struct {
	queue int

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool
}

func newFanout(queue int) *fanout {
	return &fanout{queue: queue, subs: map[*Subscription]struct{}{}}
}

func (f *fanout) subscribe(topics []string) (*Subscription, error) {
	s := &Subscription{topics: map[string]bool{}, queue: make(chan Message, f.queue), gaps: make(chan struct{}, 1), fan: f}
	for _, t := range topics {
		s.topics[t] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	f.subs[s] = struct{}{}
	return s, nil
}

// deliver queues m for each subscriber of its topic; one whose queue is
// full loses it and is told of the gap.
func (f *fanout) deliver(m Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if !s.topics[m.Topic] {
			continue
		}
		select {
		case s.queue <- m:
		default:
			s.gap()
		}
	}
}

// gapAll tells every subscriber that messages may have been lost.
func (f *fanout) gapAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		s.gap()
	}
}

func (f *fanout) remove(s *Subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.subs[s]; ok {
		delete(f.subs, s)
		close(s.queue)
	}
}

func (f *fanout) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for s := range f.subs {
		delete(f.subs, s)
		close(s.queue)
	}
}
