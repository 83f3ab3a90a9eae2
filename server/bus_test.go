package server

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"atelier/events"
	"atelier/testrig/wait"
)

// Two servers on one database: a dashboard open on B hears what A does, a
// meter moved and an event recorded there, as promptly as its own.
func TestDashboardOnOneInstanceHearsAnother(t *testing.T) {
	a := newHarness(t)
	b := newHarnessOn(t, a.store, nil)
	a.user("root", true)
	id := a.user("owner", false).createProject("watched")
	onB := b.signIn("root")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	s, status := followDashboard(ctx, t, onB, tr)
	if status != http.StatusOK {
		t.Fatalf("B's dashboard stream: %d", status)
	}
	wait.For(t, wait.Short, "the tab to follow B", func() bool { return b.app.Events.Followers() == 1 })

	seconds := int64(1234)
	if err := a.app.Meter.SetCap(ctx, id, &seconds); err != nil {
		t.Fatal(err)
	}
	wait.For(t, wait.Short, "B's tab to hear A's meter move", func() bool { return s.count(events.TopicMeters) >= 1 })
	if err := a.app.Events.Record(ctx, events.Event{Type: events.ChangeMoved, ProjectID: id}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, wait.Short, "B's tab to hear A's event", func() bool {
		return s.count(events.TopicFeed) >= 1 && s.count(events.TopicChanges) >= 1
	})
	cancel()
	<-s.done
}

// A sign-out through one instance is refused at once by another that had
// believed the sign-in a moment before, with no clock moving: the end
// reached it over the bus, not by auth.SignInRecheck passing. So does a
// password's change ending a person's other sign-ins.
func TestASignInEndedOnOneInstanceEndsOnAnother(t *testing.T) {
	a := newHarness(t)
	b := newHarnessOn(t, a.store, nil)
	// cookieOf is the client's sign-in cookie; asB sends it to B.
	cookieOf := func(c *client) string {
		u, _ := url.Parse(a.srv.URL)
		for _, ck := range c.http.Jar.Cookies(u) {
			if ck.Name == "atelier_session" {
				return ck.Value
			}
		}
		t.Fatal("no sign-in cookie")
		return ""
	}
	asB := func(cookie string) int {
		req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/projects", nil)
		req.AddCookie(&http.Cookie{Name: "atelier_session", Value: cookie})
		req.Header.Set("Accept", "application/json")
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	ann := a.user("ann", false)
	cookie := cookieOf(ann)
	if status := asB(cookie); status != http.StatusOK {
		t.Fatalf("B before the sign-out: %d", status)
	}
	if res := ann.post("/logout", nil); res.StatusCode >= 400 {
		t.Fatalf("sign out through A: %d %s", res.StatusCode, readBody(res))
	}
	wait.For(t, wait.Short, "B to refuse the ended sign-in", func() bool { return asB(cookie) != http.StatusOK })

	bob := a.user("bob", false)
	other := a.signIn("bob") // a second sign-in, which the change ends
	kept, ended := cookieOf(bob), cookieOf(other)
	for _, ck := range []string{kept, ended} {
		if status := asB(ck); status != http.StatusOK {
			t.Fatalf("B before the password's change: %d", status)
		}
	}
	if res := bob.post("/account/password", url.Values{"password": {"password-bob"}, "new_password": {"a-new-long-password"},
		"confirm": {"a-new-long-password"}}); res.StatusCode >= 400 {
		t.Fatalf("change the password through A: %d %s", res.StatusCode, readBody(res))
	}
	wait.For(t, wait.Short, "B to refuse the sign-in the change ended", func() bool { return asB(ended) != http.StatusOK })
	if status := asB(kept); status != http.StatusOK {
		t.Fatalf("B refuses the sign-in that changed the password: %d", status)
	}
}

// 500 events recorded on A as fast as the database takes them reach a
// viewer of the project's events on B, every one of them once and in
// order, each soon after its recording. The latencies are logged; the
// README's figure for events across instances comes from here.
func TestEventsOnOneInstanceReachViewersOnAnother(t *testing.T) {
	a := newHarness(t)
	b := newHarnessOn(t, a.store, nil)
	id := a.user("owner", false).createProject("watched")
	onB := b.signIn("owner")
	path := "/projects/" + itoa(id) + "/events"
	res, closeStream := onB.openStream(path)
	defer closeStream()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("B's stream of the project's events: %d %s", res.StatusCode, readBody(res))
	}
	wait.For(t, wait.Short, "the viewer to follow B", func() bool { return b.app.Events.Followers() == 1 })

	const count = 500
	arrived, read, _ := numbered(res, count)
	_, recorded := flood(t, a, id, count, 100, nil)
	waitOrFail(t, read, 10*time.Second, "B's stream to have every event of A's")
	late := make([]time.Duration, count)
	for i := range count {
		late[i] = arrived[i].Sub(recorded[i])
	}
	slices.Sort(late)
	p50, p99 := late[count/2], late[count*99/100]
	t.Logf("events across instances: p50 %v, p99 %v, worst %v", p50.Round(time.Microsecond), p99.Round(time.Microsecond), late[count-1].Round(time.Microsecond))
	// A coarse guard, not the figure: an event that waited for a poll
	// instead of the bus would take seconds.
	if p99 > time.Second {
		t.Fatalf("events across instances: p99 %v", p99)
	}
}
