package server

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/models"
	"atelier/storage"
	"atelier/testrig/miniotest"
)

// storeBackend is where a harness keeps its objects, and how much it
// really holds there: the objects of the local store (its files and what
// its packs hold live), or the objects MinIO lists.
type storeBackend struct {
	name  string
	tweak func(t *testing.T) (func(*Config), func(t *testing.T, h *harness) int64)
}

var storeBackends = []storeBackend{
	{"Local", func(t *testing.T) (func(*Config), func(t *testing.T, h *harness) int64) {
		return func(*Config) {}, func(t *testing.T, h *harness) int64 {
			t.Helper()
			n, err := h.app.objects.(*storage.Local).Usage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}},
	{"MinIO", func(t *testing.T) (func(*Config), func(t *testing.T, h *harness) int64) {
		srv := miniotest.Start(t)
		return func(c *Config) { c.S3 = srv.Config("atelier") }, func(t *testing.T, h *harness) int64 {
			t.Helper()
			_, n, err := srv.Usage(context.Background(), "atelier")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}},
}

// folderBytes is the size of every file below dir.
func folderBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// taggedFiles makes n files below dir whose content names tag.
func taggedFiles(dir, tag string, n int) []entry {
	es := make([]entry, n)
	for i := range es {
		name := fmt.Sprintf("%s/f%03d.txt", dir, i)
		es[i] = entry{name: name, body: fmt.Sprintf("%s: %s\n%s", tag, name, strings.Repeat(tag, 200))}
	}
	return es
}

// collectPastGrace makes every object and published commit older than
// the collector's grace, as if that time had passed for them, and runs a
// collection.
func collectPastGrace(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE stored_objects SET used_at = used_at - ?::interval`,
		`UPDATE published_commits SET published_at = published_at - ?::interval`,
	} {
		if err := h.store.Exec(ctx, q, fmt.Sprintf("%d seconds", int64((h.cfg.CollectGrace+time.Minute).Seconds()))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.app.Code.Collect(ctx); err != nil {
		t.Fatal(err)
	}
}

// Deleting a project imported twice removes its repository, its session's
// fork and folders, and, once collected, every object only its trees held:
// the store holds what it held before the project, and the project that
// shared files with it reads them still.
func TestDeleteProjectFreesItsStorage(t *testing.T) {
	for _, b := range storeBackends {
		t.Run(b.name, func(t *testing.T) {
			tweak, weigh := b.tweak(t)
			h := newHarness(t, tweak)
			owner := h.user("owner", false)
			shared := taggedFiles("vendor", "shared", 10)
			keeper := owner.createProject("keeper")
			mustImport(t, owner, keeper, append(taggedFiles("keep", "keep", 10), shared...))
			// What the keeper's creation left (its first, empty commit) goes
			// first: "before" is a store that holds the keeper alone.
			collectPastGrace(t, h)
			before := weigh(t, h)

			victim := owner.createProject("victim")
			mustImport(t, owner, victim, append(taggedFiles("src", "first", 20), shared...))
			mustImport(t, owner, victim, append(taggedFiles("src", "second", 20), shared...))
			if imported := weigh(t, h); imported <= before {
				t.Fatalf("two imports stored nothing: %d then %d bytes", before, imported)
			}
			s, _ := owner.openSession(victim)
			base := "/projects/" + itoa(victim) + "/sessions/" + s.ID
			if cmd, res := owner.run(base, "echo hi > made.txt", ""); res.StatusCode != http.StatusOK || cmd.ExitCode != 0 {
				t.Fatalf("command: %d %+v", res.StatusCode, cmd)
			}
			p, err := h.store.ProjectByID(context.Background(), victim)
			if err != nil {
				t.Fatal(err)
			}
			left := []string{
				canonicalDir(t, h, victim),
				filepath.Join(h.cfg.GitDir(), "edit-"+strings.TrimPrefix(s.ID, "edit_")+".git"),
				filepath.Dir(hostCheckout(t, h, s.ID)),
				filepath.Join(h.cfg.WorkspacesRoot, p.WorkspaceDirName),
			}
			for _, path := range left {
				if _, err := os.Stat(path); err != nil {
					t.Fatalf("before the deletion: %v", err)
				}
			}

			if res := owner.del("/projects/"+itoa(victim), jsonAccept); res.StatusCode != http.StatusNoContent {
				t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
			}
			for _, path := range left {
				if _, err := os.Stat(path); !os.IsNotExist(err) {
					t.Errorf("%s outlived its project: %v", path, err)
				}
			}
			collectPastGrace(t, h)
			if after := weigh(t, h); after != before {
				t.Fatalf("after deleting and collecting the store holds %d bytes, want %d as before", after, before)
			}
			for _, f := range append(taggedFiles("keep", "keep", 10)[:1], shared...) {
				got := decode[map[string]any](t, owner.get("/projects/"+itoa(keeper)+"/code/file?path="+f.name, jsonAccept))
				if got["size"] != float64(len(f.body)) {
					t.Fatalf("%s of the keeper: %v", f.name, got)
				}
			}
		})
	}
}

func mustImport(t *testing.T, c *client, id int64, files []entry) {
	t.Helper()
	if res := c.upload(id, "code.zip", zipOf(t, files), jsonAccept); res.StatusCode != http.StatusOK {
		t.Fatalf("import: %d %s", res.StatusCode, readBody(res))
	}
}

// Deleting a Local project takes its session's folder under the data dir
// away, and leaves the person's folder alone.
func TestDeleteLocalProjectFreesItsArea(t *testing.T) {
	h := newHarness(t)
	root := h.user("root", true)
	folder := filepath.Join(t.TempDir(), "local")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(folder, "README.md"), []byte("# Local\n"), 0o644)
	gitIn(t, folder, "init", "-q")
	gitIn(t, folder, "add", ".")
	gitIn(t, folder, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "start")
	id := root.mustCreateLocal("local", folder)
	s, _ := root.openSession(id)
	base := "/projects/" + itoa(id) + "/sessions/" + s.ID
	if cmd, res := root.run(base, "echo hi > made.txt", ""); res.StatusCode != http.StatusOK || cmd.ExitCode != 0 {
		t.Fatalf("command: %d %+v", res.StatusCode, cmd)
	}
	area := filepath.Join(h.cfg.SandboxDir(), s.ID)
	if _, err := os.Stat(filepath.Join(area, "checkout", "made.txt")); err != nil {
		t.Fatalf("the session's checkout is not where the test looks: %v", err)
	}
	if res := root.del("/projects/"+itoa(id), jsonAccept); res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d %s", res.StatusCode, readBody(res))
	}
	if _, err := os.Stat(area); !os.IsNotExist(err) {
		t.Fatalf("the session's folder %s outlived its project: %v", area, err)
	}
	if b, err := os.ReadFile(filepath.Join(folder, "README.md")); err != nil || string(b) != "# Local\n" {
		t.Fatalf("the person's folder was touched: %q %v", b, err)
	}
}

// An import whose tree is larger than ATELIER_PROJECT_MAX_BYTES is refused
// with 413 project_too_large, from an archive or a git source, and nothing
// of it is stored or committed.
func TestImportPastTheProjectBound(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxProjectBytes = 1 << 20 })
	admin := h.user("root", true)
	id := admin.createProject("bounded")
	mustImport(t, admin, id, []entry{{name: "small.txt", body: "small\n"}})
	canonical := canonicalOf(t, h, id)
	ctx := context.Background()
	totals, err := h.store.StoredTotals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := folderBytes(t, h.cfg.ObjectsDir())

	// Two files, each under the bound, together over it: the second stops
	// the import as it is written.
	big := []entry{{name: "a.bin", body: strings.Repeat("a", 600<<10)}, {name: "b.bin", body: strings.Repeat("b", 600<<10)}}
	p := expectProblem(t, admin.upload(id, "big.zip", zipOf(t, big), jsonAccept), http.StatusRequestEntityTooLarge, "project_too_large")
	if !strings.Contains(p.Error, "1.0 MiB") {
		t.Errorf("the refusal does not name the bound: %q", p.Error)
	}
	// A git source is measured once fetched, before it is committed.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big.bin"), []byte(strings.Repeat("c", 1100<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", src}, {"-C", src, "add", "."},
		{"-C", src, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "big"}} {
		gitIn(t, ".", args...)
	}
	expectProblem(t, admin.post("/projects/"+itoa(id)+"/import", map[string][]string{"source": {src}}, jsonAccept),
		http.StatusRequestEntityTooLarge, "project_too_large")

	if got := canonicalOf(t, h, id); got != canonical {
		t.Fatalf("canonical moved to %s", got)
	}
	if after, err := h.store.StoredTotals(ctx); err != nil || after != totals {
		t.Fatalf("the store's index went from %+v to %+v (%v)", totals, after, err)
	}
	if after := folderBytes(t, h.cfg.ObjectsDir()); after != before {
		t.Fatalf("the store went from %d to %d bytes", before, after)
	}
	// Under the bound it goes in.
	mustImport(t, admin, id, big[:1])
}

// A release that would take canonical past the bound is refused the same
// way, and the Change stays verified.
func TestReleasePastTheProjectBound(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxProjectBytes = 1 << 20 })
	runPipeline(t, h)
	owner := h.user("owner", false)
	id := owner.createProject("bounded")
	mustImport(t, owner, id, []entry{{name: "base.bin", body: strings.Repeat("x", 900<<10)}})
	canonical := canonicalOf(t, h, id)
	cid := owner.editFile(id, "more.txt", strings.Repeat("y", 200<<10))
	owner.waitChange(id, cid, models.ChangeComposed)
	if res := owner.act(id, cid, "approve"); res.StatusCode != http.StatusOK {
		t.Fatalf("approve: %d %s", res.StatusCode, readBody(res))
	}
	expectProblem(t, owner.act(id, cid, "release"), http.StatusRequestEntityTooLarge, "project_too_large")
	if got := canonicalOf(t, h, id); got != canonical {
		t.Fatalf("canonical moved to %s", got)
	}
	if ch := owner.change(id, cid); ch.Status != models.ChangeVerified {
		t.Fatalf("the change is %s, want still verified", ch.Status)
	}
}

// The dashboard tells site admins what the object store holds and each
// project's code against the bound, in sizes people read; a project whose
// code is not published yet says so rather than showing a number.
func TestDashboardShowsStorage(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxProjectBytes = 10 << 20 })
	root := h.user("root", true)
	owner := h.user("owner", false)
	id := owner.createProject("sized")
	mustImport(t, owner, id, []entry{{name: "a.bin", body: strings.Repeat("a", 3<<20)}, {name: "b.txt", body: "b\n"}})
	// A canonical commit that is not in the object store (yet).
	other := owner.createProject("unpublished")
	if err := h.store.Exec(context.Background(), `DELETE FROM published_commits WHERE commit_sha = ?`, canonicalOf(t, h, other)); err != nil {
		t.Fatal(err)
	}

	frag := root.fragment("/admin?part=storage")
	row := frag.Find("#storage-" + itoa(id))
	if got := attr(t, row, "data-bytes"); got != strconv.Itoa(3<<20+2) {
		t.Fatalf("the row says %s bytes, want %d", got, 3<<20+2)
	}
	if text := strings.Join(strings.Fields(row.Find(".used").Text()), " "); text != "3.0 MiB of 10.0 MiB (30 %)" {
		t.Fatalf("the row reads %q", text)
	}
	if text := frag.Find("#storage-" + itoa(other)).Text(); !strings.Contains(text, "Not measured yet") {
		t.Fatalf("an unpublished project's row reads %q", text)
	}
	total := strings.Join(strings.Fields(frag.Find(".storage-total").Text()), " ")
	totals, err := h.store.StoredTotals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("The object store holds 3.0 MiB in %d objects. A project’s code may take up to 10.0 MiB; what no live tree needs any more is deleted once it has not been used for an hour.", totals.Objects)
	if total != want {
		t.Fatalf("the page says %q, want %q", total, want)
	}
	// The whole page carries the part too.
	if root.page("/admin").Find("#storage #storage-"+itoa(id)).Length() != 1 {
		t.Fatal("the dashboard page lacks the storage part")
	}
}
