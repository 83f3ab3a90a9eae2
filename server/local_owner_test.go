package server

import (
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"atelier/models"
	"atelier/testrig/hostilegit"
)

// localOwner is the host account that owns the hostile Local folder.
const localOwner = hostilegit.Owner

// A Local git folder that belongs to a host account and whose config
// names programs everywhere: every page of it, its remotes and an edit
// session on it work, and none of those programs ever runs as root.
func TestLocalGitRunsAsOwner(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	admin := h.user("admin", true)
	folder, log, head := hostilegit.Repo(t, t.TempDir(), map[string]string{"README.md": "# Hostile\n", "src/app.py": "print('hi')\n"})

	res := admin.post("/projects", url.Values{"name": {"hostile"}, "mode": {"local"}, "path": {folder}}, jsonAccept)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, readBody(res))
	}
	id := decode[models.Project](t, res).ID
	p := "/projects/" + itoa(id)

	for _, path := range []string{p, p + "/code", p + "/code/tree", p + "/code/tree?path=src",
		p + "/code/file?path=README.md", p + "/code/raw?path=src/app.py"} {
		for _, hdr := range []header{nil, {"HX-Request": "true"}, jsonAccept} {
			if res := admin.get(path, hdr); res.StatusCode/100 != 2 {
				t.Errorf("GET %s (%v): %d %s", path, hdr, res.StatusCode, readBody(res))
			}
		}
	}
	doc := admin.page(p + "/code")
	if got := doc.Find("#code-head .badge").First().Text(); got != "main" {
		t.Errorf("Code page branch %q, want main", got)
	}
	rs := decode[struct {
		IsRepo  bool
		Remotes []struct{ Name string }
	}](t, admin.get(p+"/remotes", jsonAccept))
	if !rs.IsRepo || len(rs.Remotes) != 1 || rs.Remotes[0].Name != "origin" {
		t.Errorf("remotes %+v", rs)
	}

	// An edit session forks the folder's repository at its HEAD and reads,
	// saves and diffs through the fork; a command checks the fork out.
	s, sbase := admin.session(id)
	if s.BaseCommit != head {
		t.Errorf("session base %s, want HEAD %s", s.BaseCommit, head)
	}
	if body, _, status := admin.read(sbase, "src/app.py"); status != http.StatusOK || !strings.Contains(body, "print") {
		t.Errorf("session read: %d %s", status, body)
	}
	if res := admin.get(sbase+"/tree", jsonAccept); res.StatusCode != http.StatusOK {
		t.Errorf("session tree: %d %s", res.StatusCode, readBody(res))
	}
	if res := admin.put(sbase, "src/app.py", []byte("print('edited')\n"), nil); res.StatusCode/100 != 2 {
		t.Errorf("session save: %d %s", res.StatusCode, readBody(res))
	}
	if diff := readBody(admin.get(sbase+"/diff?path=src/app.py", nil)); !strings.Contains(diff, "+print('edited')") {
		t.Errorf("session diff:\n%s", diff)
	}
	out, res := admin.run(sbase, "cat README.md src/app.py", "")
	if res.StatusCode != http.StatusOK || out.ExitCode != 0 || out.Stdout != "# Hostile\nprint('edited')\n" {
		t.Errorf("command in the session: %d %+v %s", res.StatusCode, out, readBody(res))
	}

	if bad := hostilegit.NotAsOwner(t, log); len(bad) > 0 {
		t.Fatalf("programs of the folder's config ran as root: %q", bad)
	}
	// What the server left in the folder belongs to its owner.
	err := filepath.WalkDir(folder, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := os.Lstat(path); err == nil && fileUID(fi) != localOwner {
			t.Errorf("%s belongs to uid %d, not the folder's owner", path, fileUID(fi))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileUID(fi fs.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }
