package bus

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Channel is the one PostgreSQL channel every instance listens on; the
// topic travels in the payload, so a new topic needs no new LISTEN.
const Channel = "atelier_bus"

// Options configure a Postgres bus; zero durations take the defaults.
type Options struct {
	// Listener opens a connection of the bus's own, outside any pool: its
	// session holds the LISTEN.
	Listener func(ctx context.Context) (*pgx.Conn, error)
	// Notify sends a payload on a channel through any connection; the
	// notification leaves when its statement commits.
	Notify func(ctx context.Context, channel, payload string) error
	Log    *slog.Logger
	// Queue is how many messages may wait for one subscriber; 1,024.
	// Every event and hint of every instance passes through one
	// subscriber's queue, whose goroutine a busy host may not run for a
	// moment; at 7,000 bytes a message at most, a full queue holds 7 MB.
	Queue int
	// Backoff is the first wait before the listener connects again after
	// it lost its connection, doubled after each failure up to MaxBackoff;
	// 100 ms and 2 s.
	Backoff, MaxBackoff time.Duration
	// Idle is how long the listener waits for a notification before it
	// checks its connection, so one that died silently is found; 30 s.
	Idle time.Duration
}

// Postgres is a Bus over PostgreSQL's LISTEN/NOTIFY.
type Postgres struct {
	opts Options
	fan  *fanout

	stop context.CancelFunc
	done chan struct{} // closed when the listener has stopped

	mu   sync.Mutex
	shut bool
}

var _ Bus = (*Postgres)(nil)

// NewPostgres connects the listener and starts following Channel; it
// returns once the LISTEN holds, so nothing published afterwards is
// missed. Close stops it.
func NewPostgres(ctx context.Context, opts Options) (*Postgres, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Queue <= 0 {
		opts.Queue = 1024
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 2 * time.Second
	}
	if opts.Idle <= 0 {
		opts.Idle = 30 * time.Second
	}
	p := &Postgres{opts: opts, fan: newFanout(opts.Queue), done: make(chan struct{})}
	conn, err := p.listen(ctx)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p.stop = stop
	go p.run(runCtx, conn)
	return p, nil
}

// Publish sends payload on topic. The topic must be a non-empty line of
// its own and the payload text PostgreSQL can carry (UTF-8 without NUL);
// together they weigh at most MaxPayload.
func (p *Postgres) Publish(ctx context.Context, topic string, payload []byte) error {
	if topic == "" || strings.ContainsAny(topic, "\n\x00") || !utf8.ValidString(topic) ||
		bytes.IndexByte(payload, 0) >= 0 || !utf8.Valid(payload) {
		return ErrBadMessage
	}
	if len(topic)+1+len(payload) > MaxPayload {
		return fmt.Errorf("%w: %d bytes on %s", ErrTooLarge, len(payload), topic)
	}
	p.mu.Lock()
	shut := p.shut
	p.mu.Unlock()
	if shut {
		return ErrClosed
	}
	if err := p.opts.Notify(ctx, Channel, topic+"\n"+string(payload)); err != nil {
		return fmt.Errorf("bus: publish on %s: %w", topic, err)
	}
	return nil
}

// Subscribe starts a subscription with a queue of Options.Queue messages.
func (p *Postgres) Subscribe(topics ...string) (*Subscription, error) {
	return p.fan.subscribe(topics)
}

// Close stops the listener, closes its connection and ends every
// subscription.
func (p *Postgres) Close() error {
	p.mu.Lock()
	already := p.shut
	p.shut = true
	p.mu.Unlock()
	if !already {
		p.stop()
		<-p.done
		p.fan.close()
	}
	return nil
}

// listen opens the listener's connection and issues the LISTEN; its
// session is named after Channel (application_name).
func (p *Postgres) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := p.opts.Listener(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: connect: %w", err)
	}
	// Named after the channel, so pg_stat_activity tells the listener
	// apart from the pool's connections.
	if _, err := conn.Exec(ctx, "SET application_name = "+Channel+"; LISTEN "+Channel); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("bus: listen: %w", err)
	}
	p.opts.Log.Debug("bus: listening", "backend", conn.PgConn().PID())
	return conn, nil
}

// run receives notifications until ctx ends. When the connection is lost
// it connects again, waiting longer after each failure, and once the
// LISTEN holds again every subscriber is told of a gap: what was published
// meanwhile never reached this instance. The gap is told only then, so a
// subscriber that re-reads on it misses nothing published after.
func (p *Postgres) run(ctx context.Context, conn *pgx.Conn) {
	defer close(p.done)
	for {
		err := p.receive(ctx, conn)
		closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		p.opts.Log.Warn("bus: the listener lost its connection; connecting again", "err", err)
		conn = p.reconnect(ctx)
		if conn == nil {
			return
		}
		p.opts.Log.Info("bus: the listener is back; subscribers re-read what they show")
		p.fan.gapAll()
	}
}

// pingTimeout bounds the check of a quiet listener's connection. It is not
// Options.Idle: a short Idle on a loaded machine turned a slow answer into a
// reconnect, and what was published meanwhile into a gap. A closed or reset
// connection fails the ping at once; only a silent network waits this long.
const pingTimeout = 10 * time.Second

// receive hands each notification to the subscribers until the
// connection fails or ctx ends.
func (p *Postgres) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		waitCtx, cancel := context.WithTimeout(ctx, p.opts.Idle)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !pgconn.Timeout(err) {
				return err
			}
			// Quiet for a while: make sure the connection still is one.
			pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		topic, payload, ok := strings.Cut(n.Payload, "\n")
		if !ok {
			p.opts.Log.Warn("bus: a notification without a topic, ignored", "payload", n.Payload)
			continue
		}
		p.fan.deliver(Message{Topic: topic, Payload: []byte(payload)})
	}
}

// reconnect tries until it listens again or ctx ends (nil).
func (p *Postgres) reconnect(ctx context.Context) *pgx.Conn {
	wait := p.opts.Backoff
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conn, err := p.listen(connectCtx)
		cancel()
		if err == nil {
			return conn
		}
		if ctx.Err() != nil {
			return nil
		}
		p.opts.Log.Warn("bus: the listener cannot connect yet", "err", err, "retry_in", wait)
		wait = min(2*wait, p.opts.MaxBackoff)
	}
}

// closeConn says goodbye to the server if it still answers; the
// connection is gone either way, so its error tells nothing.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn.Close(ctx)
}
