package kube

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"atelier/fault"
)

// ErrClusterUnreachable: the API server could not be reached, so nothing
// ran; the session's edits are untouched and a later try may work.
var ErrClusterUnreachable = fault.New(fault.Unavailable, "cluster_unreachable",
	"kube: the cluster's API server cannot be reached",
	"The cluster that runs sessions' code cannot be reached; try again in a moment.")

// Exec runs programs in a pod's container through the API server's
// pods/exec.
type Exec struct {
	cfg       *rest.Config
	namespace string
	container string
	protocol  streamProtocol
}

// streamProtocol is how Exec streams: WebSocket with a fall back to SPDY,
// or one of them alone (for tests that must cover each).
type streamProtocol int

const (
	webSocketThenSPDY streamProtocol = iota
	webSocketOnly
	spdyOnly
)

// NewExec returns an Exec for the container of pods in namespace, reached
// as cfg says.
func NewExec(cfg *rest.Config, namespace, container string) *Exec {
	return &Exec{cfg: cfg, namespace: namespace, container: container}
}

// ExecOptions are the streams of one command.
type ExecOptions struct {
	// Container is the pod's container to run in; "": the Exec's.
	Container string
	// Stdin is the command's input. A WebSocket v4 stream (a kubelet
	// reached directly, or an API server before v5) cannot tell the
	// command that Stdin ended; SPDY and v5 can.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output; nil: not asked for.
	Stdout, Stderr io.Writer
	// TTY runs the command on a terminal; its stderr is then merged into
	// stdout, as Kubernetes requires, and Stderr is not used.
	TTY bool
	// Sizes are the terminal's sizes, the first one as soon as it is
	// known; TTY only, nil for none.
	Sizes <-chan TerminalSize
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct{ Cols, Rows uint16 }

// A DNS-1123 subdomain: what a pod's name must be. Checking it keeps a
// name from reaching another path of the API.
var podNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Run runs argv in the pod's container and returns its exit code once it
// has ended and its output has been delivered. A command that exits
// non-zero is not an error; the error is for a command that could not be
// run or whose stream broke, and is ErrClusterUnreachable (of
// fault.Unavailable) when the API server could not be reached. ctx ending
// ends the stream; whether the command then ends is the node's affair (a
// kubelet does not end an exec'd command whose stream went away).
func (e *Exec) Run(ctx context.Context, pod string, argv []string, o ExecOptions) (exitCode int, err error) {
	if !podNamePattern.MatchString(pod) {
		return 0, fmt.Errorf("kube: exec: %q is not a pod's name", pod)
	}
	if len(argv) == 0 {
		return 0, fmt.Errorf("kube: exec in pod %s: no command", pod)
	}
	u, err := e.execURL(pod, argv, o)
	if err != nil {
		return 0, fmt.Errorf("kube: exec in pod %s: %w", pod, err)
	}
	// SPDY's dialer keeps only the text of a failed dial, so the error
	// that tells an unreachable API server is caught on its way out.
	dials := &dialWatch{}
	cfg := rest.CopyConfig(e.cfg)
	cfg.Wrap(dials.wrap)
	executor, err := e.executor(cfg, u)
	if err != nil {
		return 0, fmt.Errorf("kube: exec in pod %s: %w", pod, err)
	}

	// done ends what client-go keeps reading from once Run returns: the
	// size queue at once, the caller's Stdin at its next read.
	done := make(chan struct{})
	defer close(done)
	opts := remotecommand.StreamOptions{Tty: o.TTY}
	if o.Stdin != nil {
		opts.Stdin = &stdinUntil{r: o.Stdin, done: done}
	}
	opts.Stdout = o.Stdout
	if !o.TTY {
		opts.Stderr = o.Stderr
	}
	if o.TTY && o.Sizes != nil {
		opts.TerminalSizeQueue = &sizeQueue{sizes: o.Sizes, done: done}
	}

	err = executor.StreamWithContext(ctx, opts)
	var exited exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exited) && exited.Exited():
		return exited.ExitStatus(), nil
	case ctx.Err() != nil:
		return 0, fmt.Errorf("kube: exec in pod %s: %w", pod, context.Cause(ctx))
	case unreachable(err) || unreachable(dials.failure()):
		// The person reads ErrClusterUnreachable's sentence alone; the
		// pod and the dial's error are for the log.
		return 0, fmt.Errorf("%w (exec in pod %s): %w", ErrClusterUnreachable, pod, err)
	}
	return 0, fmt.Errorf("kube: exec in pod %s: %w", pod, err)
}

// execURL is the pod's exec subresource with argv and the streams asked
// for. It is built here rather than by a typed client, whose scheme would
// register every API group at the server's start.
func (e *Exec) execURL(pod string, argv []string, o ExecOptions) (*url.URL, error) {
	base, _, err := rest.DefaultServerUrlFor(e.cfg)
	if err != nil {
		return nil, err
	}
	u := base.JoinPath("api", "v1", "namespaces", e.namespace, "pods", pod, "exec")
	q := url.Values{}
	if container := cmp.Or(o.Container, e.container); container != "" {
		q.Set("container", container)
	}
	q["command"] = argv
	flag := func(name string, on bool) {
		if on {
			q.Set(name, "true")
		}
	}
	flag("stdin", o.Stdin != nil)
	flag("stdout", o.Stdout != nil)
	flag("stderr", o.Stderr != nil && !o.TTY)
	flag("tty", o.TTY)
	u.RawQuery = q.Encode()
	return u, nil
}

// executor streams over WebSocket, falling back to SPDY when the upgrade
// is refused (an API server before 1.30, or a proxy that passes only
// SPDY). v5 is what API servers speak over WebSocket; v4 is what a
// kubelet's own streaming server speaks, for a config that reaches one.
func (e *Exec) executor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	webSocket := func() (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", u.String(), "v5.channel.k8s.io", "v4.channel.k8s.io")
	}
	spdy := func() (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(cfg, "POST", u)
	}
	switch e.protocol {
	case webSocketOnly:
		return webSocket()
	case spdyOnly:
		return spdy()
	}
	ws, err := webSocket()
	if err != nil {
		return nil, err
	}
	sp, err := spdy()
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// dialWatch keeps the last error of a request to the API server.
type dialWatch struct {
	mu  sync.Mutex
	err error
}

func (d *dialWatch) wrap(next http.RoundTripper) http.RoundTripper {
	return &watchedTransport{next: next, watch: d}
}

func (d *dialWatch) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

type watchedTransport struct {
	next  http.RoundTripper
	watch *dialWatch
}

func (t *watchedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		t.watch.mu.Lock()
		t.watch.err = err
		t.watch.mu.Unlock()
	}
	return resp, err
}

// unreachable says whether err is the API server not answering at all,
// rather than answering no.
func unreachable(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr)
}

// stdinUntil is the caller's Stdin until Run returns, then at an end:
// client-go copies stdin in a goroutine it does not wait for, which a
// Stdin that never ends would otherwise keep reading for good.
type stdinUntil struct {
	r    io.Reader
	done <-chan struct{}
}

func (s *stdinUntil) Read(p []byte) (int, error) {
	select {
	case <-s.done:
		return 0, io.EOF
	default:
	}
	return s.r.Read(p)
}

// sizeQueue hands client-go the terminal's sizes until Run returns.
type sizeQueue struct {
	sizes <-chan TerminalSize
	done  <-chan struct{}
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s, ok := <-q.sizes:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Cols, Height: s.Rows}
	case <-q.done:
		return nil
	}
}
