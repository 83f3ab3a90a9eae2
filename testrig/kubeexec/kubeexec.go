// Package kubeexec plays the API server's and the kubelet's part of a pod's
// exec for tests, with no cluster: an HTTP server that answers
// /api/v1/namespaces/{ns}/pods/{pod}/exec by handing the very request to the
// kubelet's own streaming server code (k8s.io/cri-streaming), so every byte
// of an exec crosses the same remotecommand code, WebSocket and SPDY, that a
// node runs, and a runtime that runs the commands as local processes.
package kubeexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
)

// streamPrefix is where the streaming server believes it is mounted. Only
// Serve's own handler reaches it, by rewriting an exec request's path, so
// a client cannot skip the API server's part by asking for it.
const streamPrefix = "/cri/"

// Serve starts a server that answers pods/exec for every pod of every
// namespace by running the command through rt, in the container
// "<namespace>/<pod>/<container>", and returns a client configuration that
// reaches it. Everything else is answered 404, as an API server answers a
// pod it does not know. The server is closed when the test ends.
func Serve(t testing.TB, rt streaming.Runtime) *rest.Config {
	t.Helper()
	cfg, stop, err := Start(rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return cfg
}

// Start is Serve for a caller that is not a test (the bench): stop closes
// the server and ends the streams still running.
func Start(rt streaming.Runtime) (cfg *rest.Config, stop func(), err error) {
	srv := httptest.NewUnstartedServer(nil)
	sc := streaming.DefaultConfig
	sc.Addr = srv.Listener.Addr().String()
	sc.BaseURL = &url.URL{Scheme: "http", Host: sc.Addr, Path: streamPrefix}
	streamer, err := streaming.NewServer(sc, rt)
	if err != nil {
		srv.Close()
		return nil, nil, fmt.Errorf("kubeexec: streaming server: %w", err)
	}
	a := &apiServer{streamer: streamer}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{pod}/exec", a.exec)
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/pods/{pod}/exec", a.exec)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("the server could not find the requested resource (%s %s)", r.Method, r.URL.Path))
	})
	srv.Config.Handler = mux
	srv.Start()
	return &rest.Config{Host: srv.URL}, func() {
		srv.Close()
		a.close()
	}, nil
}

// apiServer is the API server's part of an exec: it turns the pod's
// request into the runtime's, as the kubelet does. It keeps the streams it
// serves because they run on hijacked connections, which the test server's
// Close neither ends nor waits for.
type apiServer struct {
	streamer streaming.Server
	running  sync.WaitGroup

	mu     sync.Mutex
	conns  map[*watchedConn]struct{}
	closed bool
}

// close ends the streams still running, whose commands the runtime then
// ends, and waits for them.
func (a *apiServer) close() {
	a.mu.Lock()
	a.closed = true
	for c := range a.conns {
		_ = c.Close()
	}
	a.mu.Unlock()
	a.running.Wait()
}

// track keeps c until its stream ends; a connection hijacked as the
// server closes (the test server stops waiting for it at the hijack) is
// ended at once.
func (a *apiServer) track(c *watchedConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		_ = c.Close()
		return
	}
	if a.conns == nil {
		a.conns = make(map[*watchedConn]struct{})
	}
	a.conns[c] = struct{}{}
}

func (a *apiServer) forget(c *watchedConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.conns, c)
}

func (a *apiServer) exec(w http.ResponseWriter, r *http.Request) {
	a.running.Add(1)
	defer a.running.Done()
	q := r.URL.Query()
	req := &runtimeapi.ExecRequest{
		ContainerId: r.PathValue("ns") + "/" + r.PathValue("pod") + "/" + q.Get("container"),
		Cmd:         q["command"],
	}
	for _, f := range []struct {
		name string
		to   *bool
	}{{"tty", &req.Tty}, {"stdin", &req.Stdin}, {"stdout", &req.Stdout}, {"stderr", &req.Stderr}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("%s: %v", f.name, err))
			return
		}
		*f.to = b
	}
	if len(req.Cmd) == 0 {
		writeStatus(w, http.StatusBadRequest, "BadRequest", "you must specify at least one command for the container")
		return
	}
	resp, err := a.streamer.GetExec(req)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	to, err := url.Parse(resp.Url)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	// net/http stops watching a connection once it is hijacked, so the
	// request's context would outlive a client that went away, and the
	// runtime would never learn to end the command; the context here ends
	// with the connection instead, as a kubelet's exec ends when the API
	// server drops the stream.
	ctx, gone := context.WithCancel(r.Context())
	defer gone()
	fwd := r.Clone(ctx)
	fwd.URL.Path, fwd.URL.RawPath = to.Path, ""
	fwd.RequestURI = to.RequestURI()
	ww := &watchedWriter{ResponseWriter: w, gone: gone, track: a.track}
	a.streamer.ServeHTTP(ww, fwd)
	if ww.conn != nil {
		a.forget(ww.conn)
	}
}

// writeStatus answers as an API server does: a metav1.Status in JSON,
// which client-go turns into a StatusError.
func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	})
}

// watchedWriter hands out a hijacked connection whose end, by a failed
// read or by Close, calls gone.
type watchedWriter struct {
	http.ResponseWriter
	gone  context.CancelFunc
	track func(*watchedConn)
	conn  *watchedConn // once hijacked
}

func (w *watchedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("kubeexec: %T cannot be hijacked", w.ResponseWriter)
	}
	conn, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeexec: hijack: %w", err)
	}
	// Both upgraders read through the buffered reader, which holds what
	// the client sent after its upgrade request, so that is where the
	// connection's end shows.
	r := bufio.NewReader(&watchedReader{r: rw.Reader, gone: w.gone})
	w.conn = &watchedConn{Conn: conn, gone: w.gone}
	w.track(w.conn)
	return w.conn, bufio.NewReadWriter(r, rw.Writer), nil
}

type watchedReader struct {
	r    io.Reader
	gone context.CancelFunc
}

func (r *watchedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil {
		r.gone()
	}
	return n, err
}

type watchedConn struct {
	net.Conn
	gone context.CancelFunc
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.gone()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.gone()
	return c.Conn.Close()
}
