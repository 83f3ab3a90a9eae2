package gitsvc

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
)

// Export writes the tree of commit into the existing, empty folder dir:
// files with their executable bit, folders, and symlinks as links. It reads
// `git archive` as it streams and writes through an os.Root on dir, so no
// entry of any repository, however crafted, lands outside dir; entries
// whose names are not plain relative paths are skipped.
func (s *Service) Export(ctx context.Context, r *Repo, commit, dir string) error {
	if err := checkOIDs([]string{commit}); err != nil {
		return err
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return err
	}
	defer release()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("gitsvc: export: %w", err)
	}
	defer root.Close()

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.run(ctx, newCommand("archive", "--format=tar", "--end-of-options").val(commit), runOpts{repo: r, stdout: pw})
		pw.CloseWithError(err)
		done <- err
	}()
	if err := extract(tar.NewReader(pr), root); err != nil {
		pr.CloseWithError(err) // git stops on a closed pipe
		<-done
		return err
	}
	io.Copy(io.Discard, pr) // the archive's trailing padding
	if err := <-done; err != nil {
		return fmt.Errorf("gitsvc: export %s: %w", commit, err)
	}
	return nil
}

func extract(tr *tar.Reader, root *os.Root) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("gitsvc: export: %w", err)
		}
		name := path.Clean(h.Name)
		if name == "." || path.IsAbs(name) || name == ".." || len(name) > 2 && name[:3] == "../" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, 0o755)
		case tar.TypeSymlink:
			err = root.Symlink(h.Linkname, name)
		case tar.TypeReg:
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			var f *os.File
			if f, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			return fmt.Errorf("gitsvc: export %s: %w", name, err)
		}
	}
}
