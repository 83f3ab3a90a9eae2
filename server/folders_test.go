package server

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"atelier/models"
)

// No name can make a creation fail: a hundred projects named 日本, then
// names without an ASCII letter or digit, and a folder someone left where
// the next project's would go, each get their own folder and a 201.
func TestFolderNamesCannotCollide(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxProjects = 110 })
	c := h.user("squatter", false)
	dirs := map[string]string{}
	create := func(name string) {
		t.Helper()
		res := c.post("/projects", url.Values{"name": {name}, "mode": {"container"}}, jsonAccept)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create %q after %d projects: %d %s", name, len(dirs), res.StatusCode, readBody(res))
		}
		p := decode[models.Project](t, res)
		if other, ok := dirs[p.WorkspaceDirName]; ok {
			t.Fatalf("%q got folder %q, as %q did", name, p.WorkspaceDirName, other)
		}
		dirs[p.WorkspaceDirName] = name
		if fi, err := os.Stat(filepath.Join(h.cfg.WorkspacesRoot, p.WorkspaceDirName)); err != nil || !fi.IsDir() {
			t.Fatalf("%q's folder %q: %v", name, p.WorkspaceDirName, err)
		}
	}
	for range 100 {
		create("日本")
	}
	create("Проект")
	create("!!!")
	// A folder left in the workspaces root where the next project's would
	// go: the creation takes the next id.
	var last int64
	if err := h.store.Tx(context.Background(), func(tx *models.Store) error {
		var err error
		last, err = tx.NextProjectID(context.Background())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(h.cfg.WorkspacesRoot, "project--"+itoa(last+1)), 0o700); err != nil {
		t.Fatal(err)
	}
	create("中文")
}
