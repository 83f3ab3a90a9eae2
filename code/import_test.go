package code_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"atelier/auth"
	"atelier/code"
	"atelier/models"
	"atelier/projects"
	"atelier/testrig/pgtest"
	"atelier/testrig/stacktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a code service over real parts: a migrated database, git, a local
// object store and a Container project with its canonical repository.
type env struct {
	st     *stacktest.Stack
	code   *code.Service
	acc    *projects.Access
	gitDir string
	base   string // everything the service writes lives below
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	st := stacktest.New(t)
	user := &models.User{Username: "owner", PasswordHash: "x"}
	if err := st.DB.CreateUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	// No session ender: this service only creates the project.
	p, err := projects.NewService(projects.Options{Store: st.DB, Workspace: st.WS, Git: st.Git, Code: st.Code,
		Now: time.Now, Log: st.Log}).Create(ctx, user, projects.CreateInput{Name: "imports"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		st:     st,
		code:   code.NewService(code.Options{Workspace: st.WS, Git: st.Git, Code: st.Code, DB: st.DB, Log: st.Log}),
		acc:    &projects.Access{Project: p, User: user, Role: auth.RoleOwner},
		gitDir: filepath.Join(st.Dir, "git", projects.CanonicalName(p.ID)+".git"),
		base:   st.Dir,
	}
}

// instance is another instance's code service on the same database, git
// and object store.
func (e *env) instance() *code.Service {
	st := e.st
	return code.NewService(code.Options{Workspace: st.WS, Git: st.Git, Code: st.Code, DB: st.DB, Log: st.Log})
}

func (e *env) importArchive(t testing.TB, name string, archive []byte) (string, error) {
	t.Helper()
	return importThrough(t, e.code, e.acc, name, archive)
}

func importThrough(t testing.TB, svc *code.Service, acc *projects.Access, name string, archive []byte) (string, error) {
	t.Helper()
	ctx := context.Background()
	adm, err := svc.Admit(ctx, acc)
	if err != nil {
		return "", err
	}
	defer adm.Release()
	done, err := svc.Import(ctx, adm, code.ImportInput{Archive: bytes.NewReader(archive), Size: int64(len(archive)), Filename: name})
	return done.Commit, err
}

// git runs git on the project's canonical repository and returns its
// output without the final newline.
func (e *env) git(t testing.TB, args ...string) string {
	t.Helper()
	return strings.TrimSuffix(e.gitRaw(t, args...), "\n")
}

func (e *env) gitRaw(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"--git-dir", e.gitDir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return string(out)
}

// member is one entry of a test archive: a file (body), a link (link) or a
// folder (dir).
type member struct {
	name, body, link string
	dir, exec        bool
	emptyLink        bool // a link with no text at all
}

func (m member) isLink() bool { return m.link != "" || m.emptyLink }

func tarGz(t testing.TB, members []member) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, m := range members {
		h := &tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg}
		switch {
		case m.dir:
			h = &tar.Header{Name: m.name + "/", Mode: 0o755, Typeflag: tar.TypeDir}
		case m.isLink():
			h = &tar.Header{Name: m.name, Linkname: m.link, Mode: 0o777, Typeflag: tar.TypeSymlink}
		case m.exec:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(m.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zipOf(t testing.TB, members []member) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range members {
		h := &zip.FileHeader{Name: m.name, Method: zip.Deflate}
		body := m.body
		switch {
		case m.dir:
			h.Name += "/"
			h.SetMode(fs.ModeDir | 0o755)
		case m.isLink():
			h.SetMode(fs.ModeSymlink | 0o777)
			body = m.link
		case m.exec:
			h.SetMode(0o755)
		default:
			h.SetMode(0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// climb is a chain of links that each look inside the project as text but,
// followed on disk one after another, climb one folder more: "l0" is the
// project's root, "l1" its parent, "l<n>" the n-th folder above it. With 16
// of them the last is "/" from any folder a test runs in, and following it
// stays below the system's limit of 40 links per lookup.
func climb(n int) []member {
	ms := []member{{name: "l0", link: "."}}
	for i := 1; i <= n; i++ {
		ms = append(ms, member{name: fmt.Sprintf("l%d", i), link: fmt.Sprintf("l%d/..", i-1)})
	}
	return ms
}

// deepChain is links c0 to c<n>, each to the one before, the first to the
// root: inside, but c<n> is n+1 links deep.
func deepChain(n int) []member {
	ms := []member{{name: "c0", link: "."}}
	for i := 1; i <= n; i++ {
		ms = append(ms, member{name: fmt.Sprintf("c%d", i), link: fmt.Sprintf("c%d", i-1)})
	}
	return ms
}

// snapshot lists every file and folder below dirs with its size and mode,
// to tell that a refused import wrote nothing anywhere.
func snapshot(t testing.TB, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			size := info.Size()
			if info.IsDir() {
				size = 0 // a folder's size moves with its churn, not with its content
			}
			out = append(out, fmt.Sprintf("%s %v %d", p, info.Mode(), size))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(out)
	return out
}

// The link-chain archive and its variants, as a tar and as a zip, are
// refused naming the entry, and write nothing: not into the sentinel folder
// the chain reaches from the root of the file system, not anywhere below the
// service's own folders, and main does not move.
func TestImportRefusesLinksThatClimbOut(t *testing.T) {
	e := newEnv(t)
	sentinel := t.TempDir()
	// Where the last link of the chain, "/" on disk, leads next.
	intoSentinel := "l16/" + strings.TrimPrefix(sentinel, "/")

	variants := []struct {
		name    string
		members []member
		naming  string // the entry the refusal names
	}{
		{"chained dot-dot links", climb(16), "l1"},
		{"chained links, the file through the last", append(climb(16), member{name: intoSentinel + "/pwned", body: "root was here\n"}), intoSentinel + "/pwned"},
		{"link to a link that climbs", []member{
			{name: "src/main.go", body: "package main\n"},
			{name: "src/up", link: "../top/.."}, // text: the root; on disk: above it
			{name: "top", link: "src/.."},
		}, "src/up"},
		{"link to a link, in archive order", []member{
			{name: "here", link: "."},
			{name: "deep/there", link: "../here/.."},
			{name: "deep/again", link: "there"},
		}, "deep/there"},
		{"link whose link comes later", []member{
			{name: "out", link: "a/.."},
			{name: "a", link: "."},
		}, "out"},
		{"link then a file through it", []member{
			{name: "docs", link: "."},
			{name: "docs/pwned", body: "through the link\n"},
		}, "docs/pwned"},
		{"link then a folder through it", []member{
			{name: "up", link: "."},
			{name: "up/sub", dir: true},
		}, "up/sub"},
		{"file below a link named later", []member{
			{name: "x/pwned", body: "x\n"},
			{name: "x", link: "."},
		}, "x"},
		{"loop", []member{{name: "a", link: "b"}, {name: "b", link: "a"}}, "a"},
		{"more than 40 links deep", deepChain(40), "c40"},
		{"link into .git", []member{{name: "g", link: "sub/../.git/config"}}, "g"},
		{"link text climbs", []member{{name: "a/b", link: "../../etc"}}, "a/b"},
		{"absolute link", []member{{name: "p", link: "/etc/passwd"}}, "p"},
		{"link with a NUL", []member{{name: "n", link: "ok\x00/../.."}}, "n"},
	}
	main := e.git(t, "rev-parse", "refs/heads/main")
	before := snapshot(t, e.base, sentinel)
	for _, v := range variants {
		for format, archive := range map[string]func(testing.TB, []member) []byte{"tar.gz": tarGz, "zip": zipOf} {
			if format == "tar.gz" && strings.Contains(v.name, "NUL") {
				continue // a tar header cannot hold a NUL byte
			}
			t.Run(v.name+" "+format, func(t *testing.T) {
				_, err := e.importArchive(t, "evil."+format, archive(t, v.members))
				if !errors.Is(err, code.ErrBadArchive) {
					t.Fatalf("got %v, want ErrBadArchive", err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", v.naming)) {
					t.Fatalf("the refusal does not name %q: %v", v.naming, err)
				}
			})
		}
	}
	if _, err := os.Lstat(filepath.Join(sentinel, "pwned")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the chain reached the sentinel folder: %v", err)
	}
	if after := snapshot(t, e.base, sentinel); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("a refused import changed files:\nbefore %d entries, after %d:\n%s", len(before), len(after), diffLines(before, after))
	}
	if got := e.git(t, "rev-parse", "refs/heads/main"); got != main {
		t.Fatalf("a refused import moved main from %s to %s", main, got)
	}
}

func diffLines(a, b []string) string {
	in := map[string]int{}
	for _, l := range a {
		in[l]--
	}
	for _, l := range b {
		in[l]++
	}
	var d []string
	for l, n := range in {
		switch {
		case n < 0:
			d = append(d, "- "+l)
		case n > 0:
			d = append(d, "+ "+l)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// Links that stay inside, even followed through other links, import as
// links: mode 120000 with their text, next to files and executables, in one
// commit on top of the previous main.
func TestImportKeepsInwardLinks(t *testing.T) {
	e := newEnv(t)
	members := []member{
		{name: "app", dir: true},
		{name: "app/docs/readme.md", body: "# Docs\n"},
		{name: "app/bin/run.sh", body: "#!/bin/sh\necho hi\n", exec: true},
		{name: "app/readme", link: "docs/readme.md"},
		{name: "app/docs/home", link: ".."},
		{name: "app/docs/again", link: "home/docs/readme.md"},
		{name: "app/root", link: "."},
		{name: "app/via", link: "root/docs/../bin/./run.sh"},
	}
	want := map[string]string{ // path → mode and text
		"docs/readme.md": "100644 # Docs\n",
		"bin/run.sh":     "100755 #!/bin/sh\necho hi\n",
		"readme":         "120000 docs/readme.md",
		"docs/home":      "120000 ..",
		"docs/again":     "120000 home/docs/readme.md",
		"root":           "120000 .",
		"via":            "120000 root/docs/../bin/./run.sh",
	}
	for format, archive := range map[string][]byte{"tar.gz": tarGz(t, members), "zip": zipOf(t, members)} {
		t.Run(format, func(t *testing.T) {
			parent := e.git(t, "rev-parse", "refs/heads/main")
			commit, err := e.importArchive(t, "app."+format, archive)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.git(t, "rev-parse", "refs/heads/main"); got != commit {
				t.Fatalf("main at %s, import answered %s", got, commit)
			}
			if got := e.git(t, "rev-parse", commit+"^@"); got != parent {
				t.Fatalf("parents %q, want %s", got, parent)
			}
			got := map[string]string{}
			for _, line := range strings.Split(e.git(t, "ls-tree", "-r", commit), "\n") {
				meta, path, _ := strings.Cut(line, "\t")
				f := strings.Fields(meta)
				got[path] = f[0] + " " + e.gitRaw(t, "cat-file", "blob", f[2])
			}
			if len(got) != len(want) {
				t.Fatalf("tree %v, want %v", got, want)
			}
			for p, w := range want {
				if got[p] != w {
					t.Errorf("%s: %q, want %q", p, got[p], w)
				}
			}
		})
	}
}

// The rules kept from before: paths as for an edit, no hard links, each
// path once, the size limits.
func TestImportRefusals(t *testing.T) {
	e := newEnv(t)
	hardLink := func(t testing.TB) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		tw.WriteHeader(&tar.Header{Name: "a", Mode: 0o644, Typeflag: tar.TypeReg})
		tw.WriteHeader(&tar.Header{Name: "b", Linkname: "/etc/shadow", Typeflag: tar.TypeLink})
		tw.Close()
		gz.Close()
		return buf.Bytes()
	}
	// Many long links through a deep folder, each step a lookup, and the
	// last link out: checking them all must stay quick.
	deep := strings.Repeat("x/", 500)
	tangled := []member{{name: deep + "f", body: "deep\n"}, {name: "up", link: "."}}
	for i := range 1000 {
		tangled = append(tangled, member{name: fmt.Sprintf("t%d", i), link: "up/" + deep + strings.Repeat("../", 500) + "up/" + deep + "f"})
	}
	tangled = append(tangled, member{name: "zz", link: "up/../.."})
	cases := []struct {
		name, naming string
		archive      []byte
	}{
		{"many long links", "zz", tarGz(t, tangled)},
		{"dot-dot", "../evil", tarGz(t, []member{{name: "ok", body: "x"}, {name: "../evil", body: "x"}})},
		{"git folder", "sub/.GIT/config", zipOf(t, []member{{name: "sub/.GIT/config", body: "[core]"}})},
		{"twice", "a", tarGz(t, []member{{name: "a", body: "1"}, {name: "a", body: "2"}})},
		{"file/folder", "a/b", zipOf(t, []member{{name: "a", body: "1"}, {name: "a/b", body: "2"}})},
		{"hard link", "b", hardLink(t)},
		{"empty link", "e", zipOf(t, []member{{name: "e", emptyLink: true}})},
		{"long link", "l", tarGz(t, []member{{name: "l", link: strings.Repeat("a/", 2049)}})},
		{"not an archive", "", []byte("plain text")},
	}
	main := e.git(t, "rev-parse", "refs/heads/main")
	for _, c := range cases {
		start := time.Now()
		_, err := e.importArchive(t, c.name, c.archive)
		if !errors.Is(err, code.ErrBadArchive) || c.naming != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", c.naming)) {
			t.Errorf("%s: got %v, want ErrBadArchive naming %q", c.name, err, c.naming)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: refused after %s", c.name, took)
		}
	}
	if got := e.git(t, "rev-parse", "refs/heads/main"); got != main {
		t.Fatal("a refused import moved main")
	}
	// 40 links deep is as deep as a system follows, and imports.
	if _, err := e.importArchive(t, "deep.zip", zipOf(t, deepChain(39))); err != nil {
		t.Errorf("a chain of 40 links: %v", err)
	}
}

// Zips are read by the import's own reader of their directory: what other
// writers produce imports as archive/zip would read it (a zip64 end record
// past 65,535 entries, folders made on Windows, a file made on Unix with
// its executable bit), and a zip that says one thing in its directory and
// another in its data is refused naming what is wrong.
func TestImportReadsZipDirectories(t *testing.T) {
	e := newEnv(t)
	build := func(add func(zw *zip.Writer)) []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		add(zw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}

	// More entries than the classic end record can count: archive/zip
	// writes the zip64 one.
	wide := build(func(zw *zip.Writer) {
		for i := range 70_000 {
			zw.Create(fmt.Sprintf("d/%05d/", i))
		}
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "d/run.sh", Method: zip.Deflate, CreatorVersion: 3 << 8, ExternalAttrs: 0o100755 << 16})
		io.WriteString(w, "#!/bin/sh\n")
		w, _ = zw.CreateHeader(&zip.FileHeader{Name: "d/DOS", Method: zip.Store, ExternalAttrs: 0x10}) // a folder made on FAT
		_ = w
	})
	if _, err := e.importArchive(t, "wide.zip", wide); err != nil {
		t.Fatalf("a zip64 archive: %v", err)
	}
	if got := e.git(t, "ls-tree", "-r", "--format=%(objectmode) %(path)", "main"); got != "100755 run.sh" {
		t.Fatalf("the zip64 archive's tree: %q", got)
	}

	bodyOf := func(s string) []byte {
		var b bytes.Buffer
		w, _ := flate.NewWriter(&b, flate.DefaultCompression)
		io.WriteString(w, s)
		w.Close()
		return b.Bytes()
	}
	raw := func(h *zip.FileHeader, packed []byte) []byte {
		return build(func(zw *zip.Writer) {
			w, err := zw.CreateRaw(h)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(packed)
		})
	}
	body := bodyOf("hello\n")
	good := &zip.FileHeader{Name: "a.txt", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE([]byte("hello\n")),
		CompressedSize64: uint64(len(body)), UncompressedSize64: 6}
	with := func(change func(*zip.FileHeader)) *zip.FileHeader { h := *good; change(&h); return &h }
	// One entry more in the directory than its end record counts.
	extra := build(func(zw *zip.Writer) {
		zw.Create("one.txt")
		zw.Create("two.txt")
	})
	end := bytes.LastIndex(extra, []byte("PK\x05\x06"))
	binary.LittleEndian.PutUint16(extra[end+8:], 1)
	binary.LittleEndian.PutUint16(extra[end+10:], 1)

	cases := []struct {
		name, saying string
		archive      []byte
	}{
		{"wrong checksum", "does not match its checksum", raw(with(func(h *zip.FileHeader) { h.CRC32++ }), body)},
		{"longer than it says", "holds more than its directory entry says", raw(with(func(h *zip.FileHeader) { h.UncompressedSize64 = 3 }), body)},
		{"shorter than it says", "shorter than its directory entry says", raw(with(func(h *zip.FileHeader) { h.UncompressedSize64 = 60 }), body)},
		{"encrypted", "is encrypted", raw(with(func(h *zip.FileHeader) { h.Flags |= 1 }), body)},
		{"another method", "method 12", raw(with(func(h *zip.FileHeader) { h.Method = 12 }), body)},
		{"uncounted entry", "more than the 1 entries its end record says", extra},
		{"no end record", "no end record", wide[:len(wide)-22]},
	}
	main := e.git(t, "rev-parse", "refs/heads/main")
	for _, c := range cases {
		_, err := e.importArchive(t, c.name+".zip", c.archive)
		if !errors.Is(err, code.ErrBadArchive) || !strings.Contains(err.Error(), c.saying) {
			t.Errorf("%s: got %v, want ErrBadArchive saying %q", c.name, err, c.saying)
		}
	}
	if got := e.git(t, "rev-parse", "refs/heads/main"); got != main {
		t.Fatal("a refused import moved main")
	}
}

// An archive of 10,000 small files in 100 folders: the import should cost
// about what `git add -A && git commit` of the same files costs.
func BenchmarkImport10k(b *testing.B) {
	e := newEnv(b)
	var members []member
	for i := range 10_000 {
		members = append(members, member{name: fmt.Sprintf("d%02d/f%04d.txt", i%100, i), body: fmt.Sprintf("file %d\n%s", i, strings.Repeat("x", i%500))})
	}
	archive := tarGz(b, members)
	b.ResetTimer()
	for range b.N {
		if _, err := e.importArchive(b, "big.tar.gz", archive); err != nil {
			b.Fatal(err)
		}
	}
}

// A project runs one import at a time whichever instance it reaches: while
// one instance holds the project's import, another instance on the same
// database refuses the next as busy, before anything is uploaded; once it
// is released, the other imports. An instance that dies holding one (its
// database connection gone) frees the project.
func TestOneImportOfAProjectAcrossInstances(t *testing.T) {
	e := newEnv(t)
	a, b := e.code, e.instance()
	ctx := context.Background()
	held, err := a.Admit(ctx, e.acc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, e.acc); !errors.Is(err, code.ErrImportBusy) {
		t.Fatalf("a second import of the project through another instance: %v, want import_busy", err)
	}
	held.Release()
	held.Release() // twice is harmless
	if _, err := importThrough(t, b, e.acc, "b.tar.gz", tarGz(t, []member{{name: "b.txt", body: "b"}})); err != nil {
		t.Fatalf("an import through the other instance once the first ended: %v", err)
	}
	if e.git(t, "show", "main:b.txt") != "b" {
		t.Fatal("the other instance's import is not on canonical")
	}

	dying, err := b.Admit(ctx, e.acc)
	if err != nil {
		t.Fatal(err)
	}
	defer dying.Release()
	if _, err := a.Admit(ctx, e.acc); !errors.Is(err, code.ErrImportBusy) {
		t.Fatalf("while the other instance holds the import: %v, want import_busy", err)
	}
	// The instance holding the lock loses its connection, as when it dies.
	if err := e.st.DB.Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_locks
		WHERE locktype = 'advisory' AND objid = ? AND granted`, e.acc.Project.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := importThrough(t, a, e.acc, "a.tar.gz", tarGz(t, []member{{name: "a.txt", body: "a"}})); err != nil {
		t.Fatalf("an import once the holder's connection died: %v", err)
	}
}

// countingReaderAt counts the bytes read from an upload.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// A .tar.gz is read and decompressed once: its files go into git in the
// same reading that collects the entries checked as a tree. A refusal
// found only after the contents went by (a link out, last in the archive)
// leaves none of them behind.
func TestImportReadsATarOnce(t *testing.T) {
	e := newEnv(t)
	noise := func() string {
		b := make([]byte, 3<<20) // incompressible: the archive is as large
		rand.Read(b)
		return string(b)
	}
	members := []member{{name: "big.bin", body: noise()}, {name: "src/a.go", body: "package a\n"}}
	archive := tarGz(t, members)
	upload := &countingReaderAt{r: bytes.NewReader(archive)}
	adm, err := e.code.Admit(context.Background(), e.acc)
	if err != nil {
		t.Fatal(err)
	}
	done, err := e.code.Import(context.Background(), adm, code.ImportInput{Archive: upload, Size: int64(len(archive)), Filename: "once.tar.gz"})
	adm.Release()
	if err != nil {
		t.Fatal(err)
	}
	// Reading ahead by the reader's buffer is allowed; a second pass is not.
	if read := upload.n.Load(); read > int64(len(archive))+512<<10 {
		t.Errorf("the import read %d bytes of a %d-byte archive", read, len(archive))
	}
	if got := e.gitRaw(t, "cat-file", "blob", done.Commit+":big.bin"); got != members[0].body {
		t.Errorf("big.bin holds %d bytes, not the archive's", len(got))
	}

	before := snapshot(t, e.base)
	evil := []member{{name: "big.bin", body: noise()}, {name: "out", link: "../.."}}
	if _, err := e.importArchive(t, "evil.tar.gz", tarGz(t, evil)); !errors.Is(err, code.ErrBadArchive) || !strings.Contains(err.Error(), `"out"`) {
		t.Fatalf("got %v, want ErrBadArchive naming out", err)
	}
	if after := snapshot(t, e.base); !slices.Equal(after, before) {
		t.Fatalf("a refused import changed files:\n%s", diffLines(before, after))
	}
}
