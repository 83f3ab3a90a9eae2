package storage_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"atelier/storage"
)

// The crash test's child: it publishes into the folder this names until
// it is killed (see TestMain).
const publishChildEnv = "ATELIER_STORAGE_TEST_PUBLISH_INTO"

func TestMain(m *testing.M) {
	if dir := os.Getenv(publishChildEnv); dir != "" {
		publishUntilKilled(dir)
		return
	}
	os.Exit(m.Run())
}

// packedBody is object i's content: of i%7 × 100 bytes, so some are empty.
func packedBody(i int) []byte {
	return bytes.Repeat([]byte{byte('a' + i%26)}, i%7*100)
}

func packedKey(i int) string { return fmt.Sprintf("blobs/%08d", i) }

// publishUntilKilled puts objects in batches as a publish does, syncing
// after every 100 and then saying on stdout how many are synced, until it
// is killed.
func publishUntilKilled(dir string) {
	l, err := storage.NewLocal(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		body := packedBody(i)
		if err := l.PutBatched(ctx, packedKey(i), bytes.NewReader(body), int64(len(body))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if (i+1)%100 == 0 {
			if err := l.Sync(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			fmt.Println(i + 1)
		}
	}
}

// putPacked puts objects from to to (not included) in a batch.
func putPacked(t *testing.T, l *storage.Local, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		body := packedBody(i)
		if err := l.PutBatched(context.Background(), packedKey(i), bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
	}
}

// wantPacked checks objects 0 to n: those below deleted are missing, the
// others whole.
func wantPacked(t *testing.T, l *storage.Local, n, deleted int, when string) {
	t.Helper()
	for i := range n {
		got, err := getAll(t, l, packedKey(i))
		if i < deleted {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("deleted object %d %s: %v", i, when, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, packedBody(i)) {
			t.Fatalf("object %d %s: %d bytes, %v", i, when, len(got), err)
		}
	}
}

func getAll(t *testing.T, l *storage.Local, key string) ([]byte, error) {
	t.Helper()
	rc, err := l.Get(context.Background(), key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func packFiles(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	entries, err := os.ReadDir(filepath.Join(dir, "~packs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "lock" {
			names = append(names, e.Name())
		}
	}
	return names
}

// A process killed while it publishes leaves a store that opens and reads:
// every object synced before the kill is whole, the others whole or
// absent, and the store takes objects again. A pack cut in the middle of
// a record, as a crash of the machine can leave it, loses that record and
// those after it, never a record before.
func TestPackSurvivesACrashMidPublish(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), publishChildEnv+"="+dir)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	synced := 0
	lines := bufio.NewScanner(out)
	for synced < 3000 && lines.Scan() {
		synced, _ = strconv.Atoi(lines.Text())
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	if synced < 3000 {
		t.Fatalf("the publishing child stopped after %d objects", synced)
	}

	l := newLocal(t, dir)
	found := 0
	for i := 0; ; i++ {
		got, err := getAll(t, l, packedKey(i))
		if errors.Is(err, fs.ErrNotExist) && i >= synced {
			break
		}
		if err != nil || !bytes.Equal(got, packedBody(i)) {
			t.Fatalf("object %d of %d synced: %d bytes, %v; want %d bytes", i, synced, len(got), err, len(packedBody(i)))
		}
		found++
	}
	t.Logf("%d objects synced before the kill, %d read back", synced, found)
	if err := l.PutBatched(context.Background(), "blobs/after", strings.NewReader("after"), 5); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// The machine's crash: the first pack ends in the middle of a record
	// and garbage, as if the disk had not written all of it.
	pack := filepath.Join(dir, "~packs", "0.pack")
	fi, err := os.Stat(pack)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(pack, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(pack, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte{0xff}, 100))
	f.Close()
	os.Remove(filepath.Join(dir, "~packs", "0.idx")) // sealed after the kill's recovery: not sealed now
	// And the next pack's index cut short: its pack is read instead.
	if err := os.Truncate(filepath.Join(dir, "~packs", "1.idx"), 3); err != nil {
		t.Fatal(err)
	}

	l = newLocal(t, dir)
	defer l.Close()
	whole := 0
	for i := range found {
		got, err := getAll(t, l, packedKey(i))
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil || !bytes.Equal(got, packedBody(i)) {
			t.Fatalf("object %d after the cut: %d bytes, %v", i, len(got), err)
		}
		whole++
	}
	for i := whole; i < found; i++ {
		if _, err := getAll(t, l, packedKey(i)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("object %d after the cut, with %d before it whole: %v, want it missing", i, whole, err)
		}
	}
	if whole == 0 || whole >= found {
		t.Fatalf("%d of %d objects whole after cutting the pack in half", whole, found)
	}
	if got, err := getAll(t, l, "blobs/after"); err != nil || string(got) != "after" {
		t.Fatalf("the object of the next pack: %q, %v", got, err)
	}
}

// Objects deleted from a pack stay deleted after a reopen; a pack half dead
// is compacted into a new one, and one all dead goes, so what deletions
// free is freed on disk too.
func TestPackedDeletionsFreeTheDisk(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l := newLocal(t, dir)
	const n = 1000
	putPacked(t, l, 0, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := packFiles(t, dir); strings.Join(got, " ") != "0.idx 0.pack" {
		t.Fatalf("after a close: %v, want the pack and its index", got)
	}
	full := folderSize(t, dir)

	l = newLocal(t, dir)
	for i := range n / 4 {
		if err := l.Delete(ctx, packedKey(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	l = newLocal(t, dir)
	wantPacked(t, l, n, n/4, "after a reopen")
	// Past half of its bytes dead, the pack is compacted: its live
	// objects move to a new pack and it goes.
	const deleted = n/2 + 50
	for i := n / 4; i < deleted; i++ {
		if err := l.Delete(ctx, packedKey(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := packFiles(t, dir); len(got) == 0 || got[len(got)-1] != "1.pack" || slices.Contains(got, "0.pack") {
		t.Fatalf("after deleting more than half: %v, want the live objects compacted into pack 1", got)
	}
	if size := folderSize(t, dir); size > full*55/100 {
		t.Fatalf("the store takes %d bytes on disk for less than half its objects, %d for all of them", size, full)
	}
	wantPacked(t, l, n, deleted, "after the compaction")
	if used, err := l.Usage(ctx); err != nil || used != liveBytes(deleted, n) {
		t.Fatalf("Usage = %d, %v; want %d", used, err, liveBytes(deleted, n))
	}
	for i := deleted; i < n; i++ {
		if err := l.Delete(ctx, packedKey(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := packFiles(t, dir); len(got) != 0 {
		t.Fatalf("after deleting everything: %v", got)
	}
	l.Close()
}

func liveBytes(from, to int) int64 {
	var n int64
	for i := from; i < to; i++ {
		n += int64(len(packedBody(i)))
	}
	return n
}

func folderSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return err
	})
	return n
}

// Two stores over one folder, as a restarted server beside the old one:
// each sees what the other packed before it opened, neither writes into
// the other's pack, and neither removes a pack while the other is open.
func TestTwoStoresOverOneFolder(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	first := newLocal(t, dir)
	putPacked(t, first, 0, 100)
	second := newLocal(t, dir)
	putPacked(t, second, 100, 200)
	wantPacked(t, second, 200, 0, "through the second store")
	// Everything the first packed, deleted through the second: its pack
	// stays while the first is open, whose reads still find the file.
	for i := range 100 {
		if err := second.Delete(ctx, packedKey(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := getAll(t, first, packedKey(5)); err != nil || !bytes.Equal(got, packedBody(5)) {
		t.Fatalf("the first store's object after the second deleted it: %d bytes, %v", len(got), err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	third := newLocal(t, dir)
	defer third.Close()
	wantPacked(t, third, 200, 100, "once both closed")
	if got := packFiles(t, dir); strings.Join(got, " ") != "1.idx 1.pack" {
		t.Fatalf("once alone, the store left %v, want the second's pack only", got)
	}
}

// A store that compacts a pack it read while another store was writing it
// reads it again first: what the other appended after is kept, not lost
// with the old pack.
func TestCompactionKeepsWhatAnotherStoreAppended(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	first := newLocal(t, dir)
	putPacked(t, first, 0, 100)
	second := newLocal(t, dir) // knows objects 0 to 99 of the first's pack
	putPacked(t, first, 100, 200)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// Alone now, it deletes what it knew of the pack and a few more: past
	// half the pack, which is compacted.
	const deleted = 130
	for i := range deleted {
		if err := second.Delete(ctx, packedKey(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	third := newLocal(t, dir)
	defer third.Close()
	wantPacked(t, third, 200, deleted, "once both closed (100 to 199 put by the first after the second opened)")
	if got := packFiles(t, dir); slices.Contains(got, "0.pack") {
		t.Fatalf("the half-dead pack was not compacted: %v", got)
	}
}
