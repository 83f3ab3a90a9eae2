// Package pgembed starts and stops a private PostgreSQL cluster from the
// PostgreSQL programs installed on the machine, so that the server needs no
// DATABASE_URL to run. The cluster listens only on a unix socket inside its
// own 0700 directory and trusts the connections that reach it.
//
// A cluster directory holds:
//
//	data/              the data folder (PGDATA) made by initdb
//	.s.PGSQL.5432      the socket, and its .lock file
//	postgres.log       the postmaster's output
//	pgembed.lock       held while a process of ours starts the cluster
//	owner.lock         held by the process of ours that runs the postmaster
//
// The package is Linux only: it reads /proc and uses Linux process attributes.
package pgembed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"atelier/internal/tied"
)

const (
	superuser       = "atelier"
	defaultDatabase = "atelier"
	maintenanceDB   = "postgres"
	port            = 5432

	dataName   = "data"
	initName   = "data.initdb" // initdb's scratch folder, see initialize
	logName    = "postgres.log"
	lockName   = "pgembed.lock"
	ownerName  = "owner.lock"
	socketName = ".s.PGSQL.5432"

	// maxSocketPath is what fits in sockaddr_un.sun_path with its NUL.
	maxSocketPath = 107

	// startTimeout bounds the wait for a postmaster to accept connections.
	startTimeout = 60 * time.Second
	// killDelay is how long an immediate shutdown (SIGQUIT) may take
	// before the postmaster is killed.
	killDelay = 10 * time.Second
)

// ErrSocketPathTooLong reports a cluster directory too deep for its socket.
var ErrSocketPathTooLong = errors.New("pgembed: socket path too long")

// Config says where the cluster lives and how it runs.
type Config struct {
	Dir      string       // the cluster directory, e.g. <data>/postgres; created 0700
	BinDir   string       // optional; FindBinDir() when empty
	Database string       // database to ensure exists; "atelier" when empty
	Logger   *slog.Logger // optional

	// NoSync is for tests: initdb --no-sync and fsync=off, which lose data
	// on an operating system crash.
	NoSync bool
	// DieWithParent is for tests: the postmaster gets SIGQUIT when the
	// process that started it dies, even by SIGKILL (see internal/tied).
	DieWithParent bool
	// Supervise is for the server, which needs the cluster for as long as
	// it lives (see supervise.go): a postmaster that no live process of
	// ours runs any more (one a killed server left behind) is stopped and
	// started again as our child, and a postmaster that exits is started
	// again, after a back-off, until Stop. Without it Start uses such an
	// orphan as it is, and nothing restarts a postmaster that exits.
	Supervise bool
}

// Cluster is a running PostgreSQL cluster, started by us or by another
// process of ours on the same directory.
type Cluster struct {
	dir string
	log *slog.Logger
	s   *starter // how it was started, to start it again

	mu  sync.Mutex
	cur *postmaster // the one serving, or the last one until another is up

	// Set when supervised: Stop ends the supervisor and waits for it.
	endSupervisor  context.CancelFunc
	supervisorDone chan struct{}

	stopMu  sync.Mutex
	stopped bool
	stopErr error
}

// postmaster is one run of the cluster's postmaster.
type postmaster struct {
	pid     int
	started time.Time // when we started or found it

	// Set when this process started it (it is then ours to stop).
	proc    *os.Process
	exited  chan struct{} // closed once the postmaster has exited and been reaped
	waitErr error         // the postmaster's exit, readable once exited is closed
}

func (p *postmaster) owned() bool { return p.proc != nil }

// current is the postmaster the cluster has now.
func (c *Cluster) current() *postmaster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// starter carries what Start works out before the postmaster runs.
type starter struct {
	cfg    Config
	dir    string // absolute
	binDir string
	acct   *account // nil when we are not root
	log    *slog.Logger

	ownerMu sync.Mutex
	owner   *os.File // owner.lock, locked, while this process runs the postmaster
}

func (s *starter) dataDir() string { return filepath.Join(s.dir, dataName) }

// procAttr puts initdb and postgres in a process group of their own, so a
// Ctrl-C in the terminal reaches only us and we stop the cluster after the
// server has closed its pool, and runs them as the cluster user.
func (s *starter) procAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if s.acct != nil {
		attr.Credential = s.acct.credential()
	}
	return attr
}

// start starts cmd and calls exited with its end. With DieWithParent, sig
// is its parent-death signal, tied to a thread kept for it.
func (s *starter) start(cmd *exec.Cmd, sig syscall.Signal, exited func(error)) error {
	if s.cfg.DieWithParent {
		return tied.Start(cmd, sig, exited)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { exited(cmd.Wait()) }()
	return nil
}

// Start makes sure a PostgreSQL cluster runs on cfg.Dir and returns it. It
// runs initdb the first time, recovers from a server that was killed, and
// attaches to the postmaster when another process of ours already runs one on
// cfg.Dir (with cfg.Supervise, only when that process still lives). It
// returns once cfg.Database exists and accepts connections.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgembed: Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	if err := checkSocketPath(dir); err != nil {
		return nil, err
	}
	if cfg.Database == "" {
		cfg.Database = defaultDatabase
	}
	s := &starter{cfg: cfg, dir: dir, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.acct, err = clusterAccount(); err != nil {
		return nil, err
	}
	if err := s.prepareDir(); err != nil {
		return nil, err
	}

	pm, err := s.bringUp(ctx)
	if err != nil {
		s.releaseOwner()
		return nil, err
	}
	c := &Cluster{dir: dir, log: s.log, s: s, cur: pm}
	if err := c.ensureDatabase(ctx, cfg.Database); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
		return nil, err
	}
	if cfg.Supervise {
		c.supervise()
	}
	return c, nil
}

// bringUp runs startLocked under the directory's start lock, so that two
// processes of ours starting at once do not both run initdb or both take
// a postmaster.pid for stale. While the process that owns the cluster is
// about to start it again, it waits for it, up to startTimeout.
func (s *starter) bringUp(ctx context.Context) (*postmaster, error) {
	deadline := time.Now().Add(startTimeout)
	for waited := false; ; waited = true {
		unlock, err := lockDir(ctx, s.dir)
		if err != nil {
			return nil, err
		}
		pm, err := s.startLocked(ctx)
		unlock()
		if !errors.Is(err, errOwnerAway) {
			return pm, err
		}
		if !waited {
			s.log.Info("pgembed: another process of ours runs the cluster and is starting it again; waiting for it", "dir", s.dir)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pgembed: %s: %w within %v", s.dir, errOwnerAway, startTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pgembed: wait for the owner of %s: %w", s.dir, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// prepareDir creates the cluster directory and gives it to the cluster user.
func (s *starter) prepareDir() error {
	if err := os.MkdirAll(filepath.Dir(s.dir), 0o755); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if s.acct != nil {
		if err := s.acct.checkAncestors(s.dir); err != nil {
			return err
		}
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgembed: %w", err)
	}
	// The socket's safety rests on this mode.
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return fmt.Errorf("pgembed: %w", err)
	}
	if s.acct != nil {
		if err := os.Chown(s.dir, int(s.acct.uid), int(s.acct.gid)); err != nil {
			return fmt.Errorf("pgembed: %w", err)
		}
	}
	return nil
}

// startLocked attaches to a live postmaster of the directory that another
// process of ours runs, or starts one of its own. An orphan (a live
// postmaster whose owner lock nobody holds) is attached to as well, unless
// we supervise: then it is stopped and started again as our child. It
// returns errOwnerAway while another process owns the cluster but runs no
// postmaster.
func (s *starter) startLocked(ctx context.Context) (*postmaster, error) {
	pid, present, err := readPIDFile(s.dataDir())
	if err != nil {
		return nil, err
	}
	live := present && pid > 0 && alive(pid) && servesDataDir(pid, s.dataDir())
	mine, err := s.takeOwner()
	if err != nil {
		return nil, err
	}
	if live && mine && s.cfg.Supervise {
		if err := s.stopOrphan(ctx, pid); err != nil {
			return nil, err
		}
		if pid, present, err = readPIDFile(s.dataDir()); err != nil {
			return nil, err
		}
	} else if live {
		if mine { // an orphan, which a command uses as it is
			s.releaseOwner()
		}
		pm, err := s.attach(ctx, pid)
		if err == nil || alive(pid) {
			return pm, err
		}
		// It stopped while we waited for it; start our own.
		s.log.Info("pgembed: the running postmaster went away; starting a new one", "pid", pid)
		if mine, err = s.takeOwner(); err != nil {
			return nil, err
		}
	}
	if !mine {
		return nil, errOwnerAway
	}
	if present {
		if err := s.clearStale(ctx, pid); err != nil {
			return nil, err
		}
	}

	if _, err := os.Stat(s.dataDir()); errors.Is(err, fs.ErrNotExist) {
		if err := s.pickBinDir(""); err != nil {
			return nil, err
		}
		if err := s.initialize(ctx); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	} else {
		version, err := os.ReadFile(filepath.Join(s.dataDir(), "PG_VERSION"))
		if err != nil {
			return nil, fmt.Errorf("pgembed: %s is not a PostgreSQL data folder: %w", s.dataDir(), err)
		}
		if err := s.pickBinDir(strings.TrimSpace(string(version))); err != nil {
			return nil, err
		}
		if s.acct != nil && !s.acct.owns(s.dataDir()) {
			if err := s.acct.chownTree(s.dataDir()); err != nil {
				return nil, fmt.Errorf("pgembed: %w", err)
			}
		}
	}
	return s.launch(ctx)
}

// pickBinDir settles the binaries to run: cfg.BinDir, else those of the
// major version the data was made with, else the newest.
func (s *starter) pickBinDir(major string) error {
	if s.cfg.BinDir != "" {
		s.binDir = s.cfg.BinDir
		return checkBinDir(s.binDir)
	}
	dir, err := systemSearch().binDirFor(major)
	s.binDir = dir
	return err
}

// attach returns a postmaster another process of ours runs, once it
// accepts connections.
func (s *starter) attach(ctx context.Context, pid int) (*postmaster, error) {
	s.log.Info("pgembed: attaching to the running PostgreSQL", "pid", pid, "dir", s.dir)
	running := func() bool { return alive(pid) }
	if err := waitReady(ctx, dsn(s.dir, maintenanceDB), running); err != nil {
		return nil, fmt.Errorf("pgembed: postmaster %d of %s: %w", pid, s.dir, err)
	}
	return &postmaster{pid: pid, started: time.Now()}, nil
}

// DSN returns the libpq keyword/value connection string for database.
func (c *Cluster) DSN(database string) string { return dsn(c.dir, database) }

func dsn(dir, database string) string {
	return "host=" + dsnValue(dir) +
		" port=" + strconv.Itoa(port) +
		" user=" + superuser +
		" dbname=" + dsnValue(database) +
		" sslmode=disable"
}

// Owned reports whether this process runs the postmaster. It is false when
// Start attached to one that another process of ours runs; Stop leaves that
// one be.
func (c *Cluster) Owned() bool { return c.current().owned() }

// Stop ends the supervisor, if any, and shuts an owned cluster down: a fast
// shutdown (SIGINT), which rolls back open transactions and closes
// connections, then an immediate one (SIGQUIT) when ctx ends first. It
// leaves an attached cluster running. Calling it again returns the first
// call's result.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopMu.Lock()
	defer c.stopMu.Unlock()
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	if c.endSupervisor != nil {
		c.endSupervisor()
		<-c.supervisorDone
	}
	if pm := c.current(); pm.owned() {
		c.stopErr = c.stop(ctx, pm)
	}
	c.s.releaseOwner()
	return c.stopErr
}

func (c *Cluster) stop(ctx context.Context, pm *postmaster) error {
	select {
	case <-pm.exited:
		return fmt.Errorf("pgembed: postmaster %d had exited before Stop: %v", pm.pid, pm.waitErr)
	default:
	}
	if err := pm.proc.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgembed: stop postmaster %d: %w", pm.pid, err)
	}
	select {
	case <-pm.exited:
		if pm.waitErr != nil {
			return fmt.Errorf("pgembed: postmaster %d: %w", pm.pid, pm.waitErr)
		}
		c.log.Info("pgembed: PostgreSQL stopped", "pid", pm.pid)
		return nil
	case <-ctx.Done():
	}

	c.log.Warn("pgembed: fast shutdown took too long; sending SIGQUIT", "pid", pm.pid)
	_ = pm.proc.Signal(syscall.SIGQUIT)
	timer := time.NewTimer(killDelay)
	defer timer.Stop()
	select {
	case <-pm.exited:
	case <-timer.C:
		_ = pm.proc.Kill()
		<-pm.exited
	}
	return fmt.Errorf("pgembed: fast shutdown of postmaster %d unfinished, forced: %w", pm.pid, ctx.Err())
}

// ensureDatabase creates the database unless it exists.
func (c *Cluster) ensureDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.DSN(maintenanceDB))
	if err != nil {
		return fmt.Errorf("pgembed: connect: %w", err)
	}
	defer closeConn(conn)
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		return fmt.Errorf("pgembed: look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: made meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgembed: create database %s: %w", name, err)
	}
	c.log.Info("pgembed: created database", "name", name)
	return nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// dsnValue quotes a keyword/value connection string value when needed.
func dsnValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\\'") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return "'" + v + "'"
}

// checkSocketPath fails when the socket path would not fit in sun_path;
// PostgreSQL would refuse to start with a less helpful message.
func checkSocketPath(dir string) error {
	p := filepath.Join(dir, socketName)
	if len(p) > maxSocketPath {
		return fmt.Errorf("%w: %s is %d bytes, at most %d fit; use a shorter data folder",
			ErrSocketPathTooLong, p, len(p), maxSocketPath)
	}
	return nil
}

// lockDir takes the directory's start-up lock, waiting for it as long as ctx
// allows. The returned func releases it.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("pgembed: lock %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("pgembed: wait for another start on %s: %w", dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
