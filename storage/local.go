package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"atelier/internal/txwatch"
)

// Local keeps objects under a folder, by default <data>/objects: those of
// up to 1 MiB in packs, files of many objects each (pack.go tells how and
// why), larger ones as files of their own. Get looks in the packs first.
//
// A key's last segment is fanned out by its first two characters, as git
// does, so that millions of blobs do not share one folder: "blobs/3fa9c1..."
// is the file <dir>/blobs/3f/3fa9c1... (a one-character segment "x" gives
// x/x). The other segments are folders of the same names.
//
// A Put of a large object writes a temporary file next to the object's, whose name holds a '~'
// that no key can hold, syncs it, renames it over the object's name and
// syncs the folder: an object is either absent or whole, even after a crash.
// A crash can leave such a temporary file behind; it is never visible as an
// object.
//
// As on any file system, two keys where one's file would be a folder of the
// other's (for instance "a/b" and "a/b/c", or "blobs/abc" and
// "blobs/ab/abc/d") cannot both be stored: the second Put fails. Keys made of
// a kind and a hash, as Atelier's are, never meet this.
//
// Files are made 0600 and folders 0700: objects hold users' code.
type Local struct {
	dir   string
	packs *packs
}

// tempPattern names temporary files; '~' cannot appear in a key, so a
// temporary file is never mistaken for an object.
const tempPattern = "put~*"

// NewLocal returns a store over dir, creating the folder if needed.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, errors.New("storage: local: empty folder name")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: local: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("storage: local: %w", err)
	}
	ps, err := openPacks(filepath.Join(abs, packFolder))
	if err != nil {
		return nil, fmt.Errorf("storage: local: %w", err)
	}
	return &Local{dir: abs, packs: ps}, nil
}

// Close seals the pack being written, so that the next NewLocal over the
// folder reads its index instead of its records; a second Close does
// nothing. The store still reads after, and a batched put starts a pack
// the next NewLocal reads record by record.
func (l *Local) Close() error {
	if err := l.packs.close(); err != nil {
		return fmt.Errorf("storage: local: close: %w", err)
	}
	return nil
}

// path returns the file of a key that CheckKey accepted.
func (l *Local) path(key string) string {
	parent, last := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		parent, last = key[:i], key[i+1:]
	}
	fan := last[:min(2, len(last))]
	return filepath.Join(l.dir, filepath.FromSlash(parent), fan, last)
}

// Get opens the object's file.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	txwatch.Slow(ctx, "object store get")
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: get %s: %w", key, err)
	}
	if rc, ok, err := l.packs.open(key); ok {
		if err != nil {
			return nil, fmt.Errorf("storage: get %s: %w", key, err)
		}
		return rc, nil
	}
	f, err := os.Open(l.path(key))
	if err != nil {
		return nil, fmt.Errorf("storage: get %s: %w", key, notExist(err))
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file: %w", f.Name(), fs.ErrNotExist)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: get %s: %w", key, err)
	}
	return f, nil
}

// Stat returns the size of the object's file.
func (l *Local) Stat(ctx context.Context, key string) (int64, error) {
	txwatch.Slow(ctx, "object store stat")
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("storage: stat %s: %w", key, err)
	}
	if loc, ok := l.packs.get(key); ok {
		return loc.size, nil
	}
	fi, err := os.Stat(l.path(key))
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file: %w", l.path(key), fs.ErrNotExist)
	}
	if err != nil {
		return 0, fmt.Errorf("storage: stat %s: %w", key, notExist(err))
	}
	return fi.Size(), nil
}

// Put writes the object to a temporary file and renames it into place.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return l.putKey(ctx, key, r, size, true)
}

// PutBatched is Put without its disk flush for an object of up to 1 MiB:
// the object is whole or absent to every reader, and durable once Sync
// returns.
func (l *Local) PutBatched(ctx context.Context, key string, r io.Reader, size int64) error {
	return l.putKey(ctx, key, r, size, false)
}

// Sync makes every object written so far durable: one flush of the pack
// being written. (Larger objects are flushed as they are put, batched or
// not: they are few, and each is worth its flush.) Not a flush of the
// whole file system, which would wait for whatever else was written to
// it, a session's gigabytes included.
func (l *Local) Sync(ctx context.Context) error {
	txwatch.Slow(ctx, "object store sync")
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: sync: %w", err)
	}
	if err := l.packs.sync(); err != nil {
		return fmt.Errorf("storage: sync %s: %w", l.dir, err)
	}
	return nil
}

func (l *Local) putKey(ctx context.Context, key string, r io.Reader, size int64, durable bool) error {
	txwatch.Slow(ctx, "object store put")
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := checkPut(ctx, size); err != nil {
		return fmt.Errorf("storage: put %s: %w", key, err)
	}
	if err := l.putEither(ctx, key, r, size, durable); err != nil {
		return fmt.Errorf("storage: put %s: %w", key, err)
	}
	return nil
}

// putEither packs an object of up to packObjectMax bytes and writes a
// larger one to a file of its own, flushed whether durable or not; either
// way the other copy, if the key had one, goes.
func (l *Local) putEither(ctx context.Context, key string, r io.Reader, size int64, durable bool) error {
	if size > packObjectMax {
		if err := l.putFile(ctx, l.path(key), r, size); err != nil {
			return err
		}
		_, err := l.packs.forget(key)
		return err
	}
	data := make([]byte, size)
	exact := newExactReader(ctx, r, size)
	if _, err := io.ReadFull(exact, data); err != nil {
		return err
	}
	// Once all is read, the exact reader has seen r end, or says why not
	// (a reader too long, or of an object of no bytes at all).
	var one [1]byte
	if _, err := exact.Read(one[:]); err != io.EOF {
		return err
	}
	if err := l.packs.put(key, data, durable); err != nil {
		return err
	}
	return removeFile(l.path(key))
}

// putFile writes path through a temporary file, synced before the rename,
// and syncs the folder after it.
func (l *Local) putFile(ctx context.Context, path string, r io.Reader, size int64) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, tempPattern)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := io.Copy(f, newExactReader(ctx, r, size)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the folder that holds it is synced.
	return syncDir(dir)
}

// Delete removes the object's file. It never removes a folder, which a key's
// file name can be when another key lives below it.
func (l *Local) Delete(ctx context.Context, key string) error {
	txwatch.Slow(ctx, "object store delete")
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: delete %s: %w", key, err)
	}
	if _, err := l.packs.forget(key); err != nil {
		return fmt.Errorf("storage: delete %s: %w", key, err)
	}
	if err := removeFile(l.path(key)); err != nil {
		return fmt.Errorf("storage: delete %s: %w", key, err)
	}
	return nil
}

// removeFile removes an object's file if there is one. It never removes a
// folder, which a key's file name can be when another key lives below it.
func removeFile(path string) error {
	fi, err := os.Lstat(path)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err == nil {
		err = os.Remove(path)
	}
	if err != nil && !errors.Is(notExist(err), fs.ErrNotExist) {
		return err
	}
	return nil
}

// notExist makes ENOTDIR, met when a folder on the way is a file, an
// fs.ErrNotExist error like ENOENT: the object is missing all the same.
func notExist(err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w (%w)", fs.ErrNotExist, err)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Usage is the bytes of the objects the store holds: what a deletion of
// them all would free, less what packs hold dead until they are compacted
// (pack.go). It walks every file of the folder.
func (l *Local) Usage(ctx context.Context) (int64, error) {
	n := l.packs.liveBytes()
	err := filepath.WalkDir(l.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if path == l.packs.dir {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.Contains(d.Name(), "~") {
			return nil // a Put's temporary file
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("storage: usage: %w", err)
	}
	return n, nil
}
