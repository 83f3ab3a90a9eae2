package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"atelier/migrations"
	"atelier/models"
	"atelier/pgembed"
	"atelier/testrig/wait"
)

// PostgreSQL stopped under a running server: requests fail at once with
// 503 database_unavailable instead of a 500 or a hang, health says so, and
// when PostgreSQL is back everything works again by itself, saved edits
// included.
func TestDatabaseRestart(t *testing.T) {
	ctx := context.Background()
	top := t.TempDir()
	// The cluster runs as the postgres account, which must reach its folder.
	for _, d := range []string{filepath.Dir(top), top} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(top, "pg")
	start := func() *pgembed.Cluster {
		c, err := pgembed.Start(ctx, pgembed.Config{Dir: dir, NoSync: true, DieWithParent: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cluster := start()
	dsn := cluster.DSN("atelier")
	if _, err := migrations.Up(dsn); err != nil {
		t.Fatal(err)
	}
	store, err := models.Open(ctx, dsn, models.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h := newHarnessOn(t, store, nil)
	owner, id := editable(t, h)
	_, base := owner.session(id)
	if res := owner.put(base, "kept.txt", []byte("saved before\r\n"), nil); res.StatusCode >= 300 {
		t.Fatalf("save: %d %s", res.StatusCode, readBody(res))
	}

	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cluster.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for _, path := range []string{"/projects", "/projects/" + itoa(id) + "/code/tree", base + "/file?path=kept.txt"} {
		expectProblem(t, owner.get(path, jsonAccept), http.StatusServiceUnavailable, "database_unavailable")
	}
	if res := owner.put(base, "lost.txt", []byte("x"), nil); res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a save while the database is down: %d %s", res.StatusCode, readBody(res))
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("requests without a database took %v: they must fail fast", took)
	}
	if res := h.anonymous().get("/healthz", nil); res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("health without a database: %d", res.StatusCode)
	}

	cluster = start()
	t.Cleanup(func() { cluster.Stop(context.Background()) })
	var got string
	wait.Until(wait.Long, func() bool {
		var status int
		got, _, status = owner.read(base, "kept.txt")
		return status == http.StatusOK
	})
	if got != "saved before\r\n" {
		t.Fatalf("the saved edit after the restart: %q", got)
	}
	if res := owner.get("/projects", jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("after the restart: %d %s", res.StatusCode, readBody(res))
	}
}
