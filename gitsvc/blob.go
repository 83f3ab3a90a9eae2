package gitsvc

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"atelier/fault"
)

// StreamTimeout bounds one WriteBlob: long enough for a large file to reach
// a slow client, short enough that a stalled one cannot hold a git process
// for ever.
const StreamTimeout = 30 * time.Minute

// objectName is a full object id in hex (SHA-1 or SHA-256).
var objectName = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// WriteBlob writes the content of the blob sha to w as git reads it, so a
// file of any size costs a pipe's worth of memory, not its size. A sha that
// is not a blob of r is ErrNotFound.
//
// The repository's read lock is held only until git writes the first bytes
// (or ends): by then git has the object open, and a writer may go on. A
// download to a slow client must not queue every commit behind it.
func (s *Service) WriteBlob(ctx context.Context, r *Repo, sha string, w io.Writer) error {
	if !objectName.MatchString(sha) {
		return fault.Detailf(ErrBadArgument, ": object id %q", sha)
	}
	release, err := s.rlock(ctx, r, false)
	if err != nil {
		return err
	}
	defer release()
	out := &releaseOnWrite{w: w, release: release}
	c := newCommand("cat-file", "blob").val(sha)
	_, err = s.run(ctx, c, runOpts{repo: r, stdout: out, timeout: StreamTimeout})
	if err != nil && exitCode(err) == 128 && !out.wrote {
		if msg := stderrOf(err); strings.Contains(msg, "bad file") || strings.Contains(msg, "Not a valid object name") || strings.Contains(msg, "unable to read") {
			return fmt.Errorf("gitsvc: blob %s: %w: %w", sha, ErrNotFound, err)
		}
	}
	return err
}

// releaseOnWrite gives the lock back at the first write.
type releaseOnWrite struct {
	w       io.Writer
	once    sync.Once
	release func()
	wrote   bool
}

func (o *releaseOnWrite) Write(p []byte) (int, error) {
	o.once.Do(o.release)
	o.wrote = true
	return o.w.Write(p)
}
