package server

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"atelier/testrig/wait"
)

// On a slow network the dashboard's event-stream extension arrives well
// after htmx: the page still goes live, because htmx processes the page
// only once every script of it has run.
func TestBrowserLateExtensionScript(t *testing.T) {
	h := newHarness(t)
	h.user("root", true)
	ctx := browser(t)
	if err := do(ctx, signIn(h, "root", "password-root")); err != nil {
		t.Fatal(err)
	}

	paused := holdRequests(t, ctx, "*/static/vendor/hx-sse.min.js", fetch.RequestStageRequest)
	delayed := make(chan error, 1)
	go func() {
		id := <-paused
		time.Sleep(time.Second) // not a wait: the slow network itself
		delayed <- do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
			return err
		}))
	}()

	if err := do(ctx, chromedp.Navigate(h.srv.URL+"/admin")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-delayed:
		if err != nil {
			t.Fatalf("letting the extension through: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the dashboard never asked for its extension script")
	}
	wait.For(t, wait.Long, "the dashboard to follow the live stream", func() bool { return h.app.Events.Followers() >= 1 })
}

// holdRequests makes the browser hold every request whose URL matches
// pattern at stage (before it is sent, or once its answer is in) and hands
// their ids to the channel; the test lets each go on, or fails it.
func holdRequests(t *testing.T, ctx context.Context, pattern string, stage fetch.RequestStage) <-chan fetch.RequestID {
	t.Helper()
	paused := make(chan fetch.RequestID, 16)
	listen, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	if err := chromedp.Listen(listen, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e.RequestID
		}
	}); err != nil {
		t.Fatal(err)
	}
	intercept := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
			{URLPattern: pattern, RequestStage: stage},
		}})
		return err
	})
	if err := do(ctx, intercept); err != nil {
		t.Fatal(err)
	}
	return paused
}
