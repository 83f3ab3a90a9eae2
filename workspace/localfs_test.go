package workspace

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// localTree builds, on the real filesystem:
//
//	base/outside/secret           a file outside the project
//	base/root/                    the project folder
//	  src/main.go                 mainGo
//	  big.txt                     10000 bytes
//	  .gitignore                  an ordinary file
//	  .git/config, .Git/, .git.   the repository and two of its spellings
//	  bad\xff                     a name that is not UTF-8
//	  fifo, sock                  a FIFO and a listening unix socket
//	  link-inside -> src/main.go  links that stay inside
//	  link-dir -> src
//	  link-fifo -> fifo
//	  link-passwd -> /etc/passwd  links that leave
//	  link-devnull -> /dev/null
//	  link-etc -> /etc
//	  link-up -> ../outside/secret
//	  link-abs-inside -> <root>/src/main.go (absolute, so os.Root refuses it)
//	  chain/a -> b, chain/b -> ../../outside/secret
//	  dangling -> nowhere, loop -> loop
//
// and returns the root's path.
func localTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	for _, d := range []string{"outside", "root/src", "root/.git", "root/.Git", "root/chain"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"outside/secret":   "secret",
		"root/src/main.go": mainGo,
		"root/big.txt":     bigText,
		"root/.gitignore":  "*.o\n",
		"root/.git/config": "[core]\n",
		"root/.git.":       "x",
		"root/bad\xff":     "x",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(base, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := [][2]string{
		{"src/main.go", "link-inside"},
		{"src", "link-dir"},
		{"fifo", "link-fifo"},
		{"/etc/passwd", "link-passwd"},
		{"/dev/null", "link-devnull"},
		{"/etc", "link-etc"},
		{"../outside/secret", "link-up"},
		{filepath.Join(root, "src/main.go"), "link-abs-inside"},
		{"b", "chain/a"},
		{"../../outside/secret", "chain/b"},
		{"nowhere", "dangling"},
		{"loop", "loop"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	unixSocket(t, filepath.Join(root, "sock"))
	return root
}

const mainGo = "package main\n"

var bigText = strings.Repeat("0123456789", 1000)

// unixSocket leaves a listening unix socket at p. It binds in a short
// temporary folder and renames the socket into place, because a socket's
// path may not be longer than 107 bytes and t.TempDir's may be.
func unixSocket(t *testing.T, p string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	t.Cleanup(func() { ln.Close() })
	if err := os.Rename(filepath.Join(dir, "s"), p); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("precondition: %s is not a socket: %v, %v", p, fi, err)
	}
}

func openLocal(t *testing.T, root string) *LocalFS {
	t.Helper()
	l, err := admitAndOpen(t, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// admitAndOpen admits root as a site admin would create a project on it,
// then opens it the way every read does.
func admitAndOpen(t *testing.T, root string) (*LocalFS, error) {
	t.Helper()
	w, err := New("/srv/atelier-test/workspaces", nil, LocalPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := w.AdmitLocal(root, true)
	if err != nil {
		return nil, err
	}
	return w.OpenLocal(Location{DirName: "p", Mode: Local, Path: root, Identity: &id})
}

// inTime runs f and fails the test when it has not returned within a
// second, the way a FIFO opened without O_NONBLOCK would hang. fifo, when
// not "", is opened for writing on a timeout, which releases a reader stuck
// in open so the goroutine does not outlive the test.
func inTime[T any](t *testing.T, fifo string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(time.Second):
		if fifo != "" {
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
		t.Fatal("still blocked after a second")
		panic("unreachable")
	}
}

// The probe behind ErrOutsideRoot still catches os.Root's escape value; if
// a Go upgrade breaks it, escapes would be refused but misreported.
func TestEscapeProbe(t *testing.T) {
	dir := t.TempDir()
	for _, l := range [][2]string{{"/", "abs"}, {"../..", "up"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	l := openLocal(t, dir)
	if l.escape == nil {
		t.Fatal("escapeError found no value: os.Root no longer fails \"..\" with an *os.PathError")
	}
	for _, p := range []string{"../x", "abs", "up/x"} {
		if _, err := l.root.Open(p); !errors.Is(err, l.escape) {
			t.Errorf("os.Root.Open(%q) = %v, not the probed %v", p, err, l.escape)
		}
	}
	// Record what the value is today, for the reader of a failure.
	if !strings.Contains(l.escape.Error(), "escapes") {
		t.Errorf("probed %q, expected os's \"path escapes from parent\"", l.escape)
	}
}

type readResult struct {
	data []byte
	size int64
	err  error
}

// Each path is read with ReadFile and opened with Open, within a second.
func TestLocalFSRead(t *testing.T) {
	root := localTree(t)
	l := openLocal(t, root)
	tests := []struct {
		name    string
		path    string
		want    string // data when err is nil
		wantErr error
	}{
		{"file", "src/main.go", mainGo, nil},
		{"symlink inside to a file inside", "link-inside", mainGo, nil},
		{"through a symlinked folder inside", "link-dir/main.go", mainGo, nil},
		{"symlink to /etc/passwd", "link-passwd", "", ErrOutsideRoot},
		{"through a symlink to /etc", "link-etc/passwd", "", ErrOutsideRoot},
		{"symlink to /dev/null", "link-devnull", "", ErrOutsideRoot},
		{"relative symlink climbing out", "link-up", "", ErrOutsideRoot},
		{"chain a to b to outside", "chain/a", "", ErrOutsideRoot},
		{"absolute symlink even to inside", "link-abs-inside", "", ErrOutsideRoot},
		{"FIFO", "fifo", "", ErrNotRegular},
		{"symlink to a FIFO", "link-fifo", "", ErrNotRegular},
		{"socket", "sock", "", ErrNotRegular},
		{"folder", "src", "", ErrNotRegular},
		{"missing", "src/nope.go", "", fs.ErrNotExist},
		{"dangling symlink", "dangling", "", fs.ErrNotExist},
		{"symlink loop", "loop", "", syscall.ELOOP},
		{"parent", "../outside/secret", "", ErrBadPath},
		{"parent inside", "src/../big.txt", "", ErrBadPath},
		{"absolute", "/etc/passwd", "", ErrBadPath},
		{"git", ".git/config", "", ErrBadPath},
		{"git other case", ".Git", "", ErrBadPath},
		{"root", "", "", ErrBadPath},
	}
	fifo := filepath.Join(root, "fifo")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := inTime(t, fifo, func() readResult {
				data, size, err := l.ReadFile(tt.path, 1<<20)
				return readResult{data, size, err}
			})
			check := func(op string, data []byte, size int64, err error) {
				t.Helper()
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) || data != nil || size != 0 {
						t.Fatalf("%s(%q) = %q, %d, %v; want error %v", op, tt.path, data, size, err, tt.wantErr)
					}
					return
				}
				if err != nil || string(data) != tt.want || size != int64(len(tt.want)) {
					t.Fatalf("%s(%q) = %q, %d, %v; want %q", op, tt.path, data, size, err, tt.want)
				}
			}
			check("ReadFile", got.data, got.size, got.err)

			got = inTime(t, fifo, func() readResult {
				f, size, err := l.Open(tt.path)
				if err != nil {
					if f != nil {
						return readResult{err: errors.New("Open returned a file with its error")}
					}
					return readResult{size: size, err: err}
				}
				defer f.Close()
				data, err := io.ReadAll(f)
				return readResult{data, size, err}
			})
			check("Open", got.data, got.size, got.err)
		})
	}
}

// openRegular is the check that counts when a path is swapped for a FIFO or
// socket after Open looked at it: called directly, it must refuse them from
// the open file, and must not block on a FIFO that has no writer.
func TestOpenRegularRefusesSpecialFiles(t *testing.T) {
	root := localTree(t)
	l := openLocal(t, root)
	for _, p := range []string{"fifo", "link-fifo", "sock", "src"} {
		t.Run(p, func(t *testing.T) {
			err := inTime(t, filepath.Join(root, "fifo"), func() error {
				f, _, err := l.openRegular(p)
				if f != nil {
					f.Close()
				}
				return err
			})
			if !errors.Is(err, ErrNotRegular) {
				t.Fatalf("openRegular(%q) = %v, want ErrNotRegular", p, err)
			}
		})
	}
	f, size, err := l.openRegular("src/main.go")
	if err != nil || size != int64(len(mainGo)) {
		t.Fatalf("openRegular(src/main.go) = %d, %v", size, err)
	}
	defer f.Close()
	// The descriptor is handed out blocking again.
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	if err := rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || flags&unix.O_NONBLOCK != 0 {
		t.Fatalf("flags %#x, %v: O_NONBLOCK still set", flags, err)
	}
}

// A device node inside the folder itself, not reached by a symlink, is
// refused too. Creating one needs CAP_MKNOD.
func TestLocalFSRefusesDevice(t *testing.T) {
	root := t.TempDir()
	err := unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	if errors.Is(err, unix.EPERM) {
		t.Skip("precondition: creating a device node needs CAP_MKNOD")
	}
	if err != nil {
		t.Fatal(err)
	}
	l := openLocal(t, root)
	if _, _, err := l.ReadFile("null", 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile(null) = %v, want ErrNotRegular", err)
	}
	if _, _, err := l.openRegular("null"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("openRegular(null) = %v, want ErrNotRegular", err)
	}
	if e, err := l.Stat("null"); err != nil || e.Kind != KindOther {
		t.Errorf("Stat(null) = %+v, %v, want KindOther", e, err)
	}
}

func TestReadFileLimit(t *testing.T) {
	l := openLocal(t, localTree(t))
	for _, limit := range []int64{-1, 0, 1, 100, 9999, 10000, 10001, 1 << 30} {
		data, size, err := l.ReadFile("big.txt", limit)
		want := bigText[:max(0, min(limit, int64(len(bigText))))]
		if err != nil || size != int64(len(bigText)) || string(data) != want {
			t.Errorf("ReadFile(big.txt, %d) = %d bytes, size %d, %v; want %d bytes, size %d",
				limit, len(data), size, err, len(want), len(bigText))
		}
	}
}

func TestReadDir(t *testing.T) {
	root := localTree(t)
	l := openLocal(t, root)
	type listing struct {
		list []DirEntry
		err  error
	}
	res := inTime(t, filepath.Join(root, "fifo"), func() listing {
		list, err := l.ReadDir("")
		return listing{list, err}
	})
	if res.err != nil {
		t.Fatalf("ReadDir(\"\") = %v", res.err)
	}
	got := res.list
	want := []DirEntry{
		{Name: "chain", Kind: KindDir},
		{Name: "src", Kind: KindDir},
		{Name: ".gitignore", Kind: KindFile, Size: 4},
		{Name: "big.txt", Kind: KindFile, Size: 10000},
		{Name: "dangling", Kind: KindSymlink, Target: "nowhere"},
		{Name: "fifo", Kind: KindOther},
		{Name: "link-abs-inside", Kind: KindSymlink, Target: filepath.Join(root, "src/main.go")},
		{Name: "link-devnull", Kind: KindSymlink, Target: "/dev/null"},
		{Name: "link-dir", Kind: KindSymlink, Target: "src"},
		{Name: "link-etc", Kind: KindSymlink, Target: "/etc"},
		{Name: "link-fifo", Kind: KindSymlink, Target: "fifo"},
		{Name: "link-inside", Kind: KindSymlink, Target: "src/main.go"},
		{Name: "link-passwd", Kind: KindSymlink, Target: "/etc/passwd"},
		{Name: "link-up", Kind: KindSymlink, Target: "../outside/secret"},
		{Name: "loop", Kind: KindSymlink, Target: "loop"},
		{Name: "sock", Kind: KindOther},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ReadDir(\"\"):\n got %+v\nwant %+v", got, want)
	}

	sub, err := l.ReadDir("chain")
	if want := []DirEntry{{Name: "a", Kind: KindSymlink, Target: "b"}, {Name: "b", Kind: KindSymlink, Target: "../../outside/secret"}}; err != nil || !slices.Equal(sub, want) {
		t.Errorf("ReadDir(chain) = %+v, %v; want %+v", sub, err, want)
	}
	// A folder reached through a symlink inside is listed; its entries are
	// the target's.
	sub, err = l.ReadDir("link-dir")
	if want := []DirEntry{{Name: "main.go", Kind: KindFile, Size: int64(len(mainGo))}}; err != nil || !slices.Equal(sub, want) {
		t.Errorf("ReadDir(link-dir) = %+v, %v; want %+v", sub, err, want)
	}
}

func TestReadDirRefuses(t *testing.T) {
	root := localTree(t)
	l := openLocal(t, root)
	tests := []struct {
		dir     string
		wantErr error
	}{
		{"..", ErrBadPath},
		{"src/..", ErrBadPath},
		{"/", ErrBadPath},
		{".git", ErrBadPath},
		{".GIT", ErrBadPath},
		{"src/", ErrBadPath},
		{"link-etc", ErrOutsideRoot},
		{"chain/a", ErrOutsideRoot},
		{"nope", fs.ErrNotExist},
		{"src/main.go", syscall.ENOTDIR},
		{"fifo", syscall.ENOTDIR},
		{"sock", syscall.ENOTDIR},
	}
	for _, tt := range tests {
		err := inTime(t, filepath.Join(root, "fifo"), func() error {
			_, err := l.ReadDir(tt.dir)
			return err
		})
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("ReadDir(%q) = %v, want %v", tt.dir, err, tt.wantErr)
		}
	}
}

func TestStat(t *testing.T) {
	root := localTree(t)
	l := openLocal(t, root)
	tests := []struct {
		path    string
		want    DirEntry
		wantErr error
	}{
		{"src/main.go", DirEntry{Name: "main.go", Kind: KindFile, Size: int64(len(mainGo))}, nil},
		{"src", DirEntry{Name: "src", Kind: KindDir}, nil},
		{"link-dir/main.go", DirEntry{Name: "main.go", Kind: KindFile, Size: int64(len(mainGo))}, nil},
		// A link is described, never followed, even one that leaves.
		{"link-passwd", DirEntry{Name: "link-passwd", Kind: KindSymlink, Target: "/etc/passwd"}, nil},
		{"chain/a", DirEntry{Name: "a", Kind: KindSymlink, Target: "b"}, nil},
		{"fifo", DirEntry{Name: "fifo", Kind: KindOther}, nil},
		{"sock", DirEntry{Name: "sock", Kind: KindOther}, nil},
		{"link-etc/passwd", DirEntry{}, ErrOutsideRoot},
		{"missing", DirEntry{}, fs.ErrNotExist},
		{"", DirEntry{}, ErrBadPath},
		{"../root", DirEntry{}, ErrBadPath},
		{".git/config", DirEntry{}, ErrBadPath},
	}
	for _, tt := range tests {
		got, err := l.Stat(tt.path)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Stat(%q) = %+v, %v; want %v", tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Stat(%q) = %+v, %v; want %+v", tt.path, got, err, tt.want)
		}
	}
}

func TestLocalFSClose(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := admitAndOpen(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := l.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadDir(""); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("ReadDir after Close = %v, want fs.ErrClosed", err)
	}
	// A file opened before Close stays readable.
	if _, err := f.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read after Close = %v, want io.EOF", err)
	}
}

// Whatever ReadDir lists can be asked for again by name.
func TestReadDirNamesPassTheChecker(t *testing.T) {
	l := openLocal(t, localTree(t))
	list, err := l.ReadDir("")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if err := CheckRelPath(e.Name); err != nil {
			t.Errorf("listed %q, which the checker refuses: %v", e.Name, err)
		}
		if _, err := l.Stat(e.Name); err != nil {
			t.Errorf("Stat(%q) of a listed entry: %v", e.Name, err)
		}
	}
}

// A link inside the folder may not lead into .git, where credentials live.
func TestLocalFSRefusesLinksIntoGit(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".git", "config"), []byte("[remote]\nurl = https://u:token@host/r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink(".git/config", filepath.Join(root, "cfg"))
	os.Symlink(".git", filepath.Join(root, "g"))
	l := openLocal(t, root)
	for _, p := range []string{"cfg", "g/config"} {
		if _, _, err := l.ReadFile(p, 100); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("ReadFile(%q) = %v, want ErrOutsideRoot", p, err)
		}
	}
	if _, err := l.ReadDir("g"); !errors.Is(err, ErrOutsideRoot) {
		t.Errorf("ReadDir through a link to .git = %v, want ErrOutsideRoot", err)
	}
}
