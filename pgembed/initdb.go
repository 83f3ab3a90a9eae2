package pgembed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// initialize makes the cluster's data folder. initdb writes into a scratch
// folder that is renamed to data only once initdb succeeded, so a run cut
// short (Ctrl-C, a crash, a full disk) never leaves a half-made data folder:
// the next start removes the scratch folder and runs initdb again.
func (s *starter) initialize(ctx context.Context) error {
	scratch := filepath.Join(s.dir, initName)
	if err := os.RemoveAll(scratch); err != nil {
		return fmt.Errorf("pgembed: remove unfinished initdb: %w", err)
	}
	// The first start waits here for seconds before anything else is said.
	s.log.Info("pgembed: creating the PostgreSQL cluster (first start; initdb takes a few seconds)", "dir", s.dataDir(), "bindir", s.binDir)

	// C.UTF-8 classifies non-ASCII letters (lower(), ILIKE) while sorting
	// like C; plain C is the fallback for a libc that lacks it.
	out, err := s.initdb(ctx, scratch, "C.UTF-8")
	if err != nil && strings.Contains(out, "locale") {
		out, err = s.initdb(ctx, scratch, "C")
	}
	if err != nil {
		_ = os.RemoveAll(scratch)
		return fmt.Errorf("pgembed: initdb: %w\n%s", err, lastLines(out, 20))
	}

	if err := os.Rename(scratch, s.dataDir()); err != nil {
		return fmt.Errorf("pgembed: initdb: %w", err)
	}
	if !s.cfg.NoSync {
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("pgembed: initdb: %w", err)
		}
	}
	return nil
}

// initdb runs initdb once into dir, which it first empties, and returns
// initdb's output.
func (s *starter) initdb(ctx context.Context, dir, locale string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if s.acct != nil {
		if err := os.Chown(dir, int(s.acct.uid), int(s.acct.gid)); err != nil {
			return "", err
		}
	}

	args := []string{
		"-D", dir,
		"-U", superuser,
		"-E", "UTF8",
		"--locale=" + locale,
		// Only local (socket) connections are possible, and the socket
		// sits in a 0700 folder that only the cluster user and root reach.
		"--auth-local=trust",
		"--auth-host=reject",
	}
	if s.cfg.NoSync {
		args = append(args, "--no-sync")
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"), args...)
	cmd.Dir = s.dir
	cmd.Env = childEnv(s.binDir)
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = s.procAttr()
	// initdb runs postgres in bootstrap mode as its child; a cancelled
	// start must take both down.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	done := make(chan error, 1)
	err := s.start(cmd, syscall.SIGKILL, func(err error) { done <- err })
	if err == nil {
		err = <-done
	}
	if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
		err = errors.Join(ctxErr, err)
	}
	return out.String(), err
}

// syncDir makes a rename inside dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// childEnv is the whole environment of initdb and postgres. Our own PG*
// variables (PGDATA, PGPORT, PGHOST...) and locale settings must not leak
// into the cluster.
func childEnv(binDir string) []string {
	env := []string{"PATH=" + binDir + ":/usr/bin:/bin"}
	if tz, ok := os.LookupEnv("TZ"); ok {
		env = append(env, "TZ="+tz)
	}
	return env
}

// lastLines returns at most the n last lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
