package events_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"atelier/events"
	"atelier/models"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRecordStoresAndPublishes(t *testing.T) {
	db := dbtest.Store(t)
	ctx := context.Background()
	u := &models.User{Username: "ann", PasswordHash: "x"}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	p := &models.Project{Name: "p", WorkspaceDirName: "p", WorkspaceMode: models.ModeContainer}
	if err := db.CreateProject(ctx, p, u.ID); err != nil {
		t.Fatal(err)
	}
	// Everything the bus and its viewers start must be gone after Close.
	noLeaks(t)
	r := events.New(db, slog.New(slog.DiscardHandler), events.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.ServeStream(w, req, events.ProjectStream(p.ID))
	}))
	defer http.DefaultClient.CloseIdleConnections()
	defer r.Close()
	defer srv.Close()

	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The subscription is live once the response headers are in.
	if err := r.Record(ctx, events.Event{Type: events.SessionOpened, ProjectID: p.ID, ActorID: u.ID, Data: map[string]any{"session": "edit_x"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	var got []string
	for !strings.Contains(strings.Join(got, "\n"), `"session":"edit_x"`) {
		select {
		case l := <-lines:
			got = append(got, l)
		case <-deadline:
			t.Fatalf("no event on the project stream; got %q", got)
		}
	}
	if !strings.Contains(strings.Join(got, "\n"), `"type":"code.session.opened"`) {
		t.Fatalf("event type missing: %q", got)
	}
	rows, err := db.EventsOf(ctx, p.ID, events.SessionOpened)
	if err != nil || len(rows) != 1 || *rows[0].ActorID != u.ID || !strings.Contains(string(rows[0].Data), "edit_x") {
		t.Fatalf("stored events %+v %v", rows, err)
	}
	// A type outside the naming rule is refused by the table.
	if err := r.Record(ctx, events.Event{Type: "Bad Type"}); err == nil {
		t.Fatal("an event with a malformed type was stored")
	}
}
