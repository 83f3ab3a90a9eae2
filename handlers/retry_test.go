package handlers

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/fault"
	"atelier/views"
)

// TestRenderErrorSendsRetryAfter: a refusal that knows when trying again
// may work says so in whole seconds, rounded up; one that does not sends
// no header.
func TestRenderErrorSendsRetryAfter(t *testing.T) {
	render, err := views.NewRenderer(Chrome)
	if err != nil {
		t.Fatal(err)
	}
	a := Adapter{Render: render, Log: slog.New(slog.DiscardHandler)}
	busy := fault.New(fault.Limit, "busy", "test: busy", "Busy.")
	for _, c := range []struct {
		err  error
		want string
	}{
		{fault.WithRetryAfter(busy, 1500*time.Millisecond), "2"},
		{fault.WithRetryAfter(busy, time.Hour), "3600"},
		{busy, ""},
		{fault.WithRetryAfter(errors.New("not described"), time.Second), ""},
	} {
		w := httptest.NewRecorder()
		c2, _ := gin.CreateTestContext(w)
		c2.Request = httptest.NewRequest(http.MethodGet, "/x", nil)
		c2.Request.Header.Set("Accept", "application/json")
		a.RenderError(c2, c.err)
		if got := w.Header().Get("Retry-After"); got != c.want {
			t.Errorf("%v: Retry-After %q, want %q", c.err, got, c.want)
		}
	}
	if !errors.Is(fault.WithRetryAfter(busy, time.Second), busy) {
		t.Error("WithRetryAfter hides the error it describes")
	}
}
