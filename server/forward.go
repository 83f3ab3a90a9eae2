package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/fault"
	"atelier/handlers"
	"atelier/instances"
)

// errHolderUnreachable: the instance that holds the session did not answer.
var errHolderUnreachable = fault.New(fault.Unavailable, "holder_unreachable",
	"server: the instance that runs this session did not answer",
	"The server that runs this session's commands and terminals did not answer; try again in a moment. If it has stopped, another takes the session within half a minute.")

// forwarder hands requests about a session's runtime to the instance that
// holds it, marked with the cluster's secret (instances.SignForward), and
// streams the answer back as it comes: a terminal's or a command's
// events are flushed at once.
type forwarder struct {
	secret    []byte
	from      string
	now       func() time.Time
	transport http.RoundTripper
	adapter   handlers.Adapter
	log       *slog.Logger
}

func (f *forwarder) Forwarded(r *http.Request) bool {
	mark := r.Header.Get(instances.ForwardHeader)
	return mark != "" && instances.VerifyForward(f.secret, mark, r.Method, r.URL.RequestURI(), f.now())
}

func (f *forwarder) Forward(c *gin.Context, address string) {
	target, err := url.Parse(address)
	if err != nil {
		f.adapter.RenderError(c, errHolderUnreachable)
		return
	}
	// The CSRF check read a form's body to find its token: the holder gets
	// the form as it was parsed.
	if r := c.Request; r.PostForm != nil && r.MultipartForm == nil {
		body := r.PostForm.Encode()
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the page's origin, as the holder's CSRF check expects
			pr.Out.Header.Set(instances.ForwardHeader,
				instances.SignForward(f.secret, f.from, pr.Out.Method, pr.In.URL.RequestURI(), f.now()))
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, r.Context().Err()) {
				f.log.Warn("a request for another instance did not get through", "to", address, "err", err)
			}
			f.adapter.RenderError(c, errHolderUnreachable)
		},
	}
	proxy.ServeHTTP(&deadlineWriter{ResponseWriter: c.Writer}, c.Request)
}

// forwardTransport is how an instance reaches another: never through a
// proxy named in the environment (internal addresses are the cluster's
// own), a connection opened within a few seconds or not at all, and kept
// for the next keystroke. Nothing bounds the wait for an answer's head: a
// command answers when it ends.
func forwardTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// forwardWriteWait bounds each write of a forwarded answer to the browser:
// a viewer that stops reading a stream ends it, as one served here would,
// instead of holding the proxy's goroutines and the holder's stream.
const forwardWriteWait = 15 * time.Second

// deadlineWriter gives every write to the browser its own deadline.
type deadlineWriter struct{ http.ResponseWriter }

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(forwardWriteWait))
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
