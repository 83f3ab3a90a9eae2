package handlers

import (
	"errors"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"syscall"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/fault"
	"atelier/views"
)

// statusOf answers each kind of error with one HTTP status.
var statusOf = map[fault.Kind]int{
	fault.Internal:           http.StatusInternalServerError,
	fault.BadInput:           http.StatusBadRequest,
	fault.Unauthorized:       http.StatusUnauthorized,
	fault.Forbidden:          http.StatusForbidden,
	fault.NotFound:           http.StatusNotFound,
	fault.Conflict:           http.StatusConflict,
	fault.Gone:               http.StatusGone,
	fault.PreconditionFailed: http.StatusPreconditionFailed,
	fault.TooLarge:           http.StatusRequestEntityTooLarge,
	fault.Unsupported:        http.StatusUnsupportedMediaType,
	fault.Limit:              http.StatusTooManyRequests,
	fault.Upstream:           http.StatusBadGateway,
	fault.Unavailable:        http.StatusServiceUnavailable,
	fault.Full:               http.StatusInsufficientStorage,
}

// systemFaults are errors of the operating system that reach a handler
// through a path a person typed; they are no domain's own, so they are
// described here. They count only when no domain error is in the chain.
var systemFaults = []struct {
	err   error
	fault fault.Fault
}{
	{fs.ErrNotExist, fault.Fault{Kind: fault.NotFound, Reason: "not_found", Message: "No such file or folder."}},
	{syscall.ENOTDIR, fault.Fault{Kind: fault.NotFound, Reason: "not_found", Message: "No such folder."}},
	{syscall.ELOOP, fault.Fault{Kind: fault.BadInput, Reason: "link_loop", Message: "The path goes round a loop of symbolic links."}},
}

// internal is every error nobody described: its details stay in the log.
var internal = fault.Fault{Kind: fault.Internal, Reason: "internal", Message: "Something went wrong on our side."}

// ProblemOf turns any error into what the client sees. The first error in
// the chain that describes itself decides (so a bad archive that wraps the
// bad path in it is answered as the bad archive); unknown errors are 500s.
func ProblemOf(err error) *views.Problem {
	f := faultOf(err)
	return &views.Problem{Status: statusOf[f.Kind], Reason: f.Reason, Message: f.Message, Hint: f.Hint, Paths: f.Paths}
}

// faultOf is the first description of err in its chain, or internal.
func faultOf(err error) fault.Fault {
	f := internal
	var fe fault.Error
	if errors.As(err, &fe) {
		f = fe.Fault()
	} else {
		for _, s := range systemFaults {
			if errors.Is(err, s.err) {
				f = s.fault
				break
			}
		}
	}
	return f
}

// errorView is the error page.
type errorView struct{ *views.Problem }

func (v errorView) JSON() any { return v.Problem }

// RenderError answers err: JSON {"error", "reason"[, "hint"]} for JSON
// clients, a sign-in redirect for browsers that are not signed in, else the
// error page (its fragment for htmx, which swaps error responses); with
// Retry-After when the error says when to try again. Errors answered with a
// 5xx are logged with the request.
func (a Adapter) RenderError(c *gin.Context, err error) {
	p := ProblemOf(err)
	if f := faultOf(err); f.RetryAfter > 0 {
		c.Header("Retry-After", strconv.FormatInt(int64(math.Ceil(f.RetryAfter.Seconds())), 10))
	}
	if p.Status >= 500 {
		a.Log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
	}
	if p.Status == http.StatusUnauthorized && errors.Is(err, auth.ErrSignInRequired) &&
		!views.WantsJSON(c.Request) && c.Request.Method == http.MethodGet {
		views.Redirect(c, views.URL("/login").Query("next", c.Request.URL.RequestURI()).String())
		return
	}
	if rerr := a.Render.Render(c, p.Status, "error", errorView{p}); rerr != nil {
		a.Log.Error("rendering an error page failed", "err", rerr)
		c.String(p.Status, p.Message)
	}
}
