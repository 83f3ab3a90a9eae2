//go:build linux

package inpod

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// PAX records of the server's tar entries. RemoveRecord makes an entry a
// deletion: its path and everything below it are removed. KeepExecRecord
// makes a file's entry keep the executable bits of the regular file it
// replaces, as an editor's save keeps a script runnable.
const (
	RemoveRecord   = "ATELIER.remove"
	KeepExecRecord = "ATELIER.keepexec"
)

func unpackVerb(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("unpack", flag.ContinueOnError)
	flags.SetOutput(stderr)
	rootDir := flags.String("root", "/workspace", "the workspace")
	reset := flags.Bool("reset", false, "empty the workspace first")
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%w: unpack: unexpected %q", ErrBadArgs, flags.Arg(0))
	}
	fw := newFrameWriter(stdout, false)
	var st UnpackStatus
	root, err := os.OpenRoot(*rootDir)
	if err == nil {
		st.Entries, err = unpack(root, stdin, *reset, fw)
		root.Close()
	}
	if err != nil {
		st.Error = err.Error()
	}
	if err := fw.json(FrameStatus, st); err != nil {
		return err
	}
	return fw.flush()
}

// unpack writes the tar stream r into root and reports each entry it
// wrote or removed to fw, returning how many.
func unpack(root *os.Root, r io.Reader, reset bool, fw *frameWriter) (int, error) {
	if reset {
		if err := emptyRoot(root); err != nil {
			return 0, err
		}
	}
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("inpod: unpack: read tar: %w", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader { // git archive's commit id
			continue
		}
		name, err := cleanRel(h.Name)
		if err != nil {
			return n, fmt.Errorf("inpod: unpack: %w", err)
		}
		err = writeEntry(root, name, h, tr, func(e *Entry) error {
			n++
			return fw.json(FrameEntry, e)
		})
		if err != nil {
			return n, fmt.Errorf("inpod: unpack: %s: %w", name, err)
		}
	}
}

// writeEntry puts one tar entry at name, replacing whatever is there, and
// reports what it wrote, as lstat sees it then, with the folders it made
// to hold it: the server's manifest must hold every path it did not see
// the session make.
func writeEntry(root *os.Root, name string, h *tar.Header, content io.Reader, report func(*Entry) error) error {
	if name == "." {
		if h.Typeflag == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%w: the root is a folder", ErrBadPath)
	}
	if h.PAXRecords[RemoveRecord] == "1" {
		if err := remove(root, name); err != nil {
			return err
		}
		return report(&Entry{Path: name, Kind: KindWhiteout})
	}
	if err := makeParents(root, name, report); err != nil {
		return err
	}
	var e *Entry
	var err error
	switch h.Typeflag {
	case tar.TypeReg:
		mode := fs.FileMode(h.Mode) & 0o777
		if h.PAXRecords[KeepExecRecord] == "1" {
			if fi, err := root.Lstat(name); err == nil && fi.Mode().IsRegular() {
				mode |= fi.Mode().Perm() & 0o111
			}
		}
		e, err = writeFile(root, name, mode, content)
	case tar.TypeDir:
		e, err = writeDir(root, name, fs.FileMode(h.Mode)&0o777|0o700)
	case tar.TypeSymlink:
		e, err = writeLink(root, name, h.Linkname)
	default:
		return fmt.Errorf("inpod: unsupported tar entry type %q", h.Typeflag)
	}
	if err != nil {
		return err
	}
	return report(e)
}

// makeParents makes the folders holding name, refusing a link or a file
// where a folder should be: os.Root keeps writes inside the root but
// follows links within it, and a write must never go through a link the
// session's code put in its way. It reports the folders it made.
func makeParents(root *os.Root, name string, report func(*Entry) error) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	els := strings.Split(dir, "/")
	for i := range els {
		p := strings.Join(els[:i+1], "/")
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			var e *Entry
			if e, err = writeDir(root, p, 0o755); err == nil {
				err = report(e)
			}
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a folder", ErrBadPath, p)
		}
	}
	return nil
}

// remove removes name and everything below it, if it is there. A path
// below a link is not there: the link is never followed.
func remove(root *os.Root, name string) error {
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return root.RemoveAll(name)
}

func writeFile(root *os.Root, name string, mode fs.FileMode, content io.Reader) (*Entry, error) {
	if err := remove(root, name); err != nil {
		return nil, err
	}
	// O_EXCL: whatever the session's code put here since remove is not
	// written through.
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := io.Copy(f, content); err != nil {
		return nil, err
	}
	if err := f.Chmod(mode); err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return statEntry(name, fi), f.Close()
}

func writeLink(root *os.Root, name, target string) (*Entry, error) {
	if err := remove(root, name); err != nil {
		return nil, err
	}
	if err := root.Symlink(target, name); err != nil {
		return nil, err
	}
	return lstatEntry(root, name)
}

func writeDir(root *os.Root, name string, mode fs.FileMode) (*Entry, error) {
	fi, err := root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err := remove(root, name); err != nil {
			return nil, err
		}
		if err := root.Mkdir(name, mode); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	// Mkdir's mode went through the umask.
	if err := root.Chmod(name, mode); err != nil {
		return nil, err
	}
	return lstatEntry(root, name)
}

func lstatEntry(root *os.Root, name string) (*Entry, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	e := statEntry(name, fi)
	if e.Kind == KindLink {
		if e.Target, err = root.Readlink(name); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// statEntry describes what a stat without following links found at name.
func statEntry(name string, fi fs.FileInfo) *Entry {
	st := fi.Sys().(*syscall.Stat_t)
	return entryOf(name, st.Mode, st.Ino, st.Size, st.Ctim.Nano(), st.Mtim.Nano())
}

func entryOf(name string, mode uint32, ino uint64, size, ctimeNs, mtimeNs int64) *Entry {
	e := &Entry{Path: name, Kind: KindOther, Mode: mode & 0o7777, Size: size, Ino: ino, CtimeNs: ctimeNs, MtimeNs: mtimeNs}
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		e.Kind = KindFile
	case syscall.S_IFDIR:
		e.Kind = KindDir
	case syscall.S_IFLNK:
		e.Kind = KindLink
	}
	return e
}

// emptyRoot removes everything inside root, but not root.
func emptyRoot(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("inpod: reset: %w", err)
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			if err := root.RemoveAll(n); err != nil {
				return fmt.Errorf("inpod: reset: %w", err)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("inpod: reset: %w", err)
		}
	}
}
