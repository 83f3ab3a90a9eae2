//go:build linux

package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// oneFileBase is a shareable base of one file.
type oneFileBase struct{ id string }

func (b oneFileBase) ID() string { return b.id }

func (oneFileBase) WriteTar(_ context.Context, w io.Writer) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	tw.Write([]byte("base\n"))
	tw.Close()
	_, err := w.Write(buf.Bytes())
	return err
}

// Where the host cannot show a shared tree as a session's user's, each
// workspace unpacks a base of its own and hands it to its user, as without
// sharing, and the provider stops trying.
func TestLocalWithoutIdmapUnpacksEachBase(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("precondition: root, which mounts the checkouts")
	}
	was := holderBinary
	holderBinary = func() (string, error) { return "", errNoIdmap }
	t.Cleanup(func() { holderBinary = was })

	dir := t.TempDir()
	l := NewLocal(LocalConfig{Area: filepath.Join(dir, "sessions"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	for i, s := range []Session{{ID: "edit_plain_a", UID: 3_950_001}, {ID: "edit_plain_b", UID: 3_950_002}} {
		p, err := l.Prepare(ctx, s, oneFileBase{id: "feed"})
		if err != nil || !p.Fresh {
			t.Fatalf("Prepare %s = %+v, %v", s.ID, p, err)
		}
		top, _ := l.folder(s)
		fi, err := os.Lstat(filepath.Join(top, "checkout", "a.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != s.UID {
			t.Errorf("%s: a.txt is %d's, want the session's %d", s.ID, uid, s.UID)
		}
		if _, err := os.Lstat(filepath.Join(top, "lower", "a.txt")); p.Layered && err != nil {
			t.Errorf("%s: no lower layer of its own: %v", s.ID, err)
		}
		if !l.bases.off {
			t.Fatalf("after session %d, sharing is still on", i)
		}
		if err := l.Release(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(l.cfg.BaseArea); len(entries) != 0 {
		t.Fatalf("trees were left: %v", entries)
	}
}
