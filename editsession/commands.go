package editsession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/sandbox"
	"atelier/workspace"
)

// Command limits (ADR 0029).
const (
	CommandTimeout = 120 * time.Second
	CommandTail    = 64 << 10
	// maxNotes bounds the notes of one command; a build that writes
	// thousands of files gets a count instead of thousands of lines.
	maxNotes = 50
)

// ErrNoSandbox is a session opened before sessions had a uid of their own.
var ErrNoSandbox = errors.New("editsession: this session has no sandbox user; discard it and open a new one")

// Sandboxes is what commands need to run: where sessions' files go and the
// sandbox itself.
type Sandboxes struct {
	Box       *sandbox.Sandbox
	Meter     *meter.Meter
	LocalArea string // <data>/sandboxes: Local projects' execution areas
	UIDBase   uint32
	UIDCount  uint32 // sessions' uids are UIDBase + [0, UIDCount)
	Instance  string // this server process, for the meter's reservations
}

// CommandResult is what a command did, as the person sees it.
type CommandResult struct {
	ExitCode        int      `json:"exitCode"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutTruncated bool     `json:"stdoutTruncated"`
	StderrTruncated bool     `json:"stderrTruncated"`
	DurationMS      int64    `json:"durationMs"`
	Notes           []string `json:"notes"`
}

// SetSandboxes enables commands.
func (s *Service) SetSandboxes(sb *Sandboxes) {
	s.sb = sb
	s.checkouts = newCheckouts()
	s.AddCleaner(sandboxCleaner{s})
}

// area is the project's execution area on this host: under its root for a
// Container project, under the data dir for a Local one (whose folder is
// the person's own).
func (s *Service) area(p *models.Project) (string, error) {
	if p.WorkspaceMode == models.ModeLocal {
		dir := filepath.Join(s.sb.LocalArea, p.WorkspaceDirName)
		return dir, os.MkdirAll(dir, 0o700)
	}
	return s.ws.ScopeRoot(projects.Location(p))
}

func (s *Service) identity(cs *models.CodeSession) (uint32, error) {
	if cs.SandboxSlot == nil {
		return 0, ErrNoSandbox
	}
	return s.sb.UIDBase + uint32(*cs.SandboxSlot), nil
}

// RunCommand runs command in folder of the session's checkout as the
// session's user, then turns what it changed into edits. It reserves
// sandbox time first and settles it after, and audits the command.
func (s *Service) RunCommand(ctx context.Context, sess *Session, command, folder string) (*CommandResult, error) {
	if s.sb == nil {
		return nil, ErrNoSandbox
	}
	if err := workspace.CheckRelDir(folder); err != nil {
		return nil, err
	}
	if strings.TrimSpace(command) == "" {
		return nil, ErrEmptyCommand
	}
	uid, err := s.identity(sess.CodeSession)
	if err != nil {
		return nil, err
	}
	unlock := s.checkouts.lock(sess.ID)
	defer unlock()

	res, err := s.sb.Meter.Reserve(ctx, sess.ProjectID, s.sb.Instance)
	if err != nil {
		return nil, err
	}
	start := s.now()
	out, runErr := s.runInCheckout(ctx, sess, uid, command, folder)
	end := s.now()
	if _, err := s.sb.Meter.Settle(context.WithoutCancel(ctx), res, start, end); err != nil {
		s.log.Error("sandbox time not settled", "session", sess.ID, "err", err)
	}
	if runErr != nil {
		return nil, runErr
	}
	audit := &models.SessionCommand{SessionID: sess.ID, Command: command, Folder: folder,
		ExitCode: out.ExitCode, DurationMS: out.DurationMS, StartedAt: start}
	if err := s.db.AddSessionCommand(ctx, audit); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Service) runInCheckout(ctx context.Context, sess *Session, uid uint32, command, folder string) (*CommandResult, error) {
	co, err := s.checkoutFor(ctx, sess, uid)
	if err != nil {
		return nil, err
	}
	dir := co.dir
	if folder != "" {
		dir = filepath.Join(co.dir, folder)
	}
	network := sandbox.Network(sess.Project.SandboxNetwork)
	result, err := s.sb.Box.Run(ctx, sandbox.Spec{
		UID: uid, GID: uid, Workspace: co.dir, Dir: dir, Home: co.home, Tmp: co.tmp,
		Argv:    []string{"/bin/bash", "--noprofile", "--norc", "-c", command},
		Network: network,
	}, sandbox.Limits{Timeout: CommandTimeout, MaxStream: CommandTail, Tail: true, TimeoutExit: 124})
	// Run returns once every process of the command has ended (its PID
	// namespace goes with it); the session's shells live on.
	co.lastUsed = s.now()
	if err != nil {
		return nil, err
	}
	notes, err := s.capture(ctx, sess, co)
	if err != nil {
		return nil, err
	}
	if len(notes) > maxNotes {
		notes = append(notes[:maxNotes], fmt.Sprintf("and %d more left out", len(notes)-maxNotes))
	}
	stderr := string(result.Stderr)
	for _, n := range notes {
		stderr += "atelier: " + n + "\n"
	}
	return &CommandResult{
		ExitCode: result.ExitCode, Stdout: string(result.Stdout), Stderr: stderr,
		StdoutTruncated: result.StdoutTruncated, StderrTruncated: result.StderrTruncated,
		DurationMS: result.Duration.Milliseconds(), Notes: nonNilNotes(notes),
	}, nil
}

func nonNilNotes(n []string) []string {
	if n == nil {
		return []string{}
	}
	return n
}

// checkoutFor returns the session's checkout, built from the fork and the
// edits when it is missing, else brought up to date with the edits.
func (s *Service) checkoutFor(ctx context.Context, sess *Session, uid uint32) (*checkout, error) {
	area, err := s.area(sess.Project)
	if err != nil {
		return nil, err
	}
	hex := strings.TrimPrefix(sess.ID, "edit_")
	s.checkouts.mu.Lock()
	co, ok := s.checkouts.live[sess.ID]
	s.checkouts.mu.Unlock()
	if ok {
		if _, err := os.Lstat(co.dir); err == nil {
			return co, s.sync(ctx, sess, co)
		}
	}
	co = &checkout{dir: filepath.Join(area, "edit-"+hex), home: filepath.Join(area, "home-"+hex),
		tmp: filepath.Join(area, "tmp-"+hex), uid: uid, gid: uid}
	for _, d := range []string{co.home, co.tmp} {
		if err := sandbox.PrepareDir(d, uid, uid); err != nil {
			return nil, err
		}
	}
	if err := s.build(ctx, sess, co); err != nil {
		return nil, err
	}
	s.checkouts.mu.Lock()
	s.checkouts.live[sess.ID] = co
	s.checkouts.mu.Unlock()
	return co, nil
}

// DropIdleCheckouts removes checkouts unused for two minutes; the next
// command rebuilds them from the fork and the edits. Run calls it.
func (s *Service) DropIdleCheckouts(ctx context.Context) {
	if s.checkouts == nil {
		return
	}
	now := s.now()
	s.checkouts.mu.Lock()
	var idle []string
	for id, co := range s.checkouts.live {
		if now.Sub(co.lastUsed) >= checkoutIdle && !s.hasShells(id) {
			idle = append(idle, id)
		}
	}
	s.checkouts.mu.Unlock()
	for _, id := range idle {
		unlock := s.checkouts.lock(id)
		s.checkouts.mu.Lock()
		co := s.checkouts.live[id]
		if co != nil && s.now().Sub(co.lastUsed) >= checkoutIdle {
			delete(s.checkouts.live, id)
		} else {
			co = nil
		}
		s.checkouts.mu.Unlock()
		if co != nil {
			if err := os.RemoveAll(co.dir); err != nil {
				s.log.Warn("idle checkout not removed", "session", id, "err", err)
			}
		}
		unlock()
	}
}

// sandboxCleaner ends a session's sandbox: every process of its user, then
// its checkout, home and /tmp.
type sandboxCleaner struct{ s *Service }

func (c sandboxCleaner) EndSession(ctx context.Context, cs *models.CodeSession) error {
	s := c.s
	if cs.SandboxSlot == nil {
		return nil
	}
	uid := s.sb.UIDBase + uint32(*cs.SandboxSlot)
	s.closeShells(cs.ID)
	unlock := s.checkouts.lock(cs.ID)
	defer unlock()
	if err := s.sb.Box.KillAll(ctx, uid); err != nil {
		return err
	}
	p, err := s.db.ProjectByID(ctx, cs.ProjectID)
	if err != nil {
		return err
	}
	area, err := s.area(p)
	if err != nil {
		return err
	}
	hex := strings.TrimPrefix(cs.ID, "edit_")
	s.checkouts.mu.Lock()
	delete(s.checkouts.live, cs.ID)
	s.checkouts.mu.Unlock()
	for _, dir := range []string{filepath.Join(area, "edit-"+hex), filepath.Join(area, "home-"+hex), filepath.Join(area, "tmp-"+hex)} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

// historyLength is how many past commands the page lists.
const historyLength = 20

// History returns the session's latest commands and the project's sandbox
// time this month.
func (s *Service) History(ctx context.Context, sess *Session) ([]models.SessionCommand, meter.Usage, error) {
	cmds, err := s.db.SessionCommands(ctx, sess.ID, historyLength)
	if err != nil || s.sb == nil {
		return cmds, meter.Usage{}, err
	}
	usage, err := s.sb.Meter.Usage(ctx, sess.ProjectID)
	return cmds, usage, err
}

// KillLeftovers kills whatever processes the users of unfinished sessions
// still have, such as a command that outlived a crashed server.
func (s *Service) KillLeftovers(ctx context.Context) error {
	if s.sb == nil {
		return nil
	}
	css, err := s.db.UnfinishedSessions(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, cs := range css {
		if cs.SandboxSlot != nil {
			errs = append(errs, s.sb.Box.KillAll(ctx, s.sb.UIDBase+uint32(*cs.SandboxSlot)))
		}
	}
	return errors.Join(errs...)
}
