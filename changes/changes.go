// Package changes carries a person's edits to canonical: a submit (or the
// Code page's single-file edit) records one Change with one human
// ChangeSet, composed on the current canonical; the Change is verified by
// the project's check command in the sandbox (or approved by an owner or
// admin), and only a verified Change whose base is still canonical is
// released onto it. Nothing else of Atelier advances canonical with
// people's edits.
package changes

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"atelier/editsession"
	"atelier/events"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
	"atelier/workbench"
	"atelier/workspace"
)

var (
	ErrNotFound        = fault.New(fault.NotFound, "not_found", "changes: no such change", "There is no such change.")
	ErrNothingToSubmit = fault.New(fault.Conflict, "nothing_to_submit", "changes: the session changes no file", "The session changes no file; edit something first.")
	ErrBadMessage      = fault.New(fault.BadInput, "bad_message", "changes: a message has at most 10000 characters", "A message has at most 10000 characters.")
	ErrNotVerified     = fault.New(fault.Conflict, "not_verified", "changes: only a verified change is released", "Only a verified change is released.")
	ErrNotWaiting      = fault.New(fault.Conflict, "not_waiting", "changes: the change does not wait for an approval", "The change does not wait for an approval.")
	ErrFinished        = fault.New(fault.Conflict, "finished", "changes: the change is released, withdrawn or superseded", "The change is released, withdrawn or superseded.")
	ErrNotAuthor       = fault.New(fault.Forbidden, "not_author", "changes: only its author withdraws a change", "Only its author withdraws a change.")
	ErrOwnChange       = fault.New(fault.Forbidden, "own_change", "changes: another owner or admin approves a change, not its author", "Another owner or admin approves this change, not its author.")
	ErrNoRepository    = fault.New(fault.Conflict, "no_base", "changes: the project's folder is not a git repository with a commit", "The project's folder is not a git repository with a commit.")
	ErrBadCheck        = fault.New(fault.BadInput, "bad_check_command", "changes: a check command has 1 to 1000 characters on one line", "A check command has 1 to 1000 characters on one line.")
)

// StaleBaseError refuses a submit whose edited paths canonical changed
// since the session's base.
type StaleBaseError struct{ Paths []string }

func (e *StaleBaseError) Error() string {
	return "changes: canonical changed edited paths since the base: " + strings.Join(e.Paths, ", ")
}

// Fault answers 409 stale_base with the paths.
func (e *StaleBaseError) Fault() fault.Fault {
	return fault.Fault{Kind: fault.Conflict, Reason: "stale_base",
		Message: "Canonical changed files you edited since your session began.",
		Hint:    "Rebase the session onto the current canonical: the edits of other files come along, these you make again.",
		Paths:   e.Paths}
}

// Service runs the Change pipeline.
type Service struct {
	db     *models.Store
	git    *gitsvc.Service
	code   *codestore.Store
	ws     *workspace.Workspaces
	edits  *editsession.Sessions
	checks Checker
	events *events.Recorder
	now    func() time.Time
	log    *slog.Logger

	// The verifier (pipeline.go).
	instance   string
	claimFor   time.Duration
	renewEvery time.Duration
	pollEvery  time.Duration
	wake       chan struct{}   // a Change was queued here
	wakeups    <-chan struct{} // one was queued elsewhere
	queuedHook func()
}

// Checker runs a project's check command on a commit in the sandbox:
// workbench.Runtime.
type Checker interface {
	RunCheck(ctx context.Context, p *models.Project, repo *gitsvc.Repo, commit, command string, key int64) (*workbench.CheckResult, error)
}

// Options are what the pipeline works with.
type Options struct {
	DB        *models.Store
	Git       *gitsvc.Service
	Code      *codestore.Store
	Workspace *workspace.Workspaces
	// Sessions are the edit sessions submits seal and end.
	Sessions *editsession.Sessions
	// Checks runs the projects' checks.
	Checks Checker
	Events *events.Recorder
	Now    func() time.Time
	Log    *slog.Logger

	// Instance names this server process in the claims of the checks it
	// runs; a random name when empty.
	Instance string
	// ClaimFor is how long a claim on a check holds unless renewed, and so
	// how soon after its instance stops a check is taken again
	// (defaultClaimFor when zero); it is renewed every third of it.
	ClaimFor time.Duration
	// PollEvery is how often Run looks for due checks when nothing wakes
	// it (defaultPollEvery when zero).
	PollEvery time.Duration
	// Wakeups, when set, tells Run that a Change was queued on another
	// instance, so it need not wait for its next poll.
	Wakeups <-chan struct{}
	// Queued, when set, is called after a Change was queued here, to tell
	// the other instances.
	Queued func()
}

// New returns the pipeline; Run verifies what it queues.
func New(o Options) *Service {
	claimFor := cmp.Or(o.ClaimFor, defaultClaimFor)
	return &Service{db: o.DB, git: o.Git, code: o.Code, ws: o.Workspace, edits: o.Sessions, checks: o.Checks,
		events: o.Events, now: o.Now, log: o.Log,
		instance: cmp.Or(o.Instance, newKey()), claimFor: claimFor, renewEvery: claimFor / 3,
		pollEvery: cmp.Or(o.PollEvery, defaultPollEvery), wake: make(chan struct{}, 1),
		wakeups: o.Wakeups, queuedHook: o.Queued}
}

// workspaceFork is the person's workspace fork on the project, ws-<k>.
func workspaceFork(projectID, userID int64) string {
	return projects.WorkspaceForkName(projectID, userID)
}

// canonical is where a project's canonical lives: its bare repository, or
// a Local folder's own repository and branch.
type canonical struct {
	repo   *gitsvc.Repo
	local  bool
	closer func()
}

func (s *Service) openCanonical(ctx context.Context, p *models.Project) (*canonical, error) {
	if p.WorkspaceMode != models.ModeLocal {
		repo, err := s.git.OpenBare(projects.CanonicalName(p.ID))
		if err != nil {
			return nil, err
		}
		return &canonical{repo: repo, closer: func() {}}, nil
	}
	l, err := s.ws.OpenLocal(projects.Location(p))
	if err != nil {
		return nil, err
	}
	repo, err := s.git.OpenLocal(ctx, l.Path()) // why a path: workspace.LocalFS.Path
	if errors.Is(err, gitsvc.ErrNotRepository) {
		l.Close()
		return nil, ErrNoRepository
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return &canonical{repo: repo, local: true, closer: func() { l.Close() }}, nil
}

// head is canonical's commit and branch; the caller holds the lock.
func (s *Service) head(ctx context.Context, c *canonical) (string, string, error) {
	commit, branch, err := s.git.Head(ctx, c.repo)
	if errors.Is(err, gitsvc.ErrNotFound) {
		return "", "", ErrNoRepository
	}
	return commit, branch, err
}

// fork returns the person's workspace fork with commit in it, making it
// (or bringing commit into it) as needed. A Container fork borrows
// canonical's objects, so every canonical commit is in it; a Local one
// holds copies.
func (s *Service) fork(ctx context.Context, p *models.Project, userID int64, c *canonical, commit string) (*gitsvc.Repo, error) {
	name := workspaceFork(p.ID, userID)
	repo, err := s.git.OpenBare(name)
	if errors.Is(err, gitsvc.ErrNotFound) {
		repo, err = s.git.Fork(ctx, c.repo, commit, name)
		if err != nil {
			// Another request of the same person made it first.
			if again, aerr := s.git.OpenBare(name); aerr == nil {
				repo, err = again, nil
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if !c.local {
		return repo, nil
	}
	if _, err := s.git.ResolveCommit(ctx, repo, commit); errors.Is(err, gitsvc.ErrNotFound) {
		err = s.git.CopySnapshot(ctx, c.repo, repo, commit)
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	return repo, nil
}

// changeRef keeps a Change's commit reachable in its fork.
func changeRef(key string) string { return "refs/changes/" + key }

func newKey() string {
	b := make([]byte, 12)
	rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// Edit is one path a person changed: its whole new content, or a deletion.
type Edit struct {
	Path    string
	Content []byte
	Deleted bool
}

// humanChange is what recordHumanChange turns into a Change.
type humanChange struct {
	project   *models.Project
	author    *models.User
	sessionID string // "" for the Code page's single-file edit
	key       string // names the commit's ref; "" for a random one
	base      string // the commit the edits were made on
	message   string // "" for the default one
	// edits returns the edits to compose and the audit the ChangeSet
	// carries, or the Change that already stands for them. It runs under
	// canonical's write reservation, before anything is composed.
	edits func(ctx context.Context) ([]Edit, []models.SessionCommand, *models.Change, error)
	// record writes ch and set, in a short transaction of its own: the
	// commit is composed by then, and canonical's reservation still held.
	record func(ctx context.Context, ch *models.Change, set *models.ChangeSet) error
}

// recordHumanChange is the one way edits become a Change with one human
// ChangeSet. Under canonical's write reservation it reads the edits and
// canonical's head; when canonical moved since the base, the paths it
// changed must not be edited ones (else *StaleBaseError) and the commit is
// composed on the head instead. The commit is written in the person's
// workspace fork without a work tree, authored by them with their message,
// and only then recorded, so no transaction waits for git. created is
// false when edits found the Change already made.
func (s *Service) recordHumanChange(ctx context.Context, hc humanChange) (ch *models.Change, created bool, err error) {
	c, err := s.openCanonical(ctx, hc.project)
	if err != nil {
		return nil, false, err
	}
	defer c.closer()
	ctx, release, err := s.git.HoldRepo(ctx, c.repo, true)
	if err != nil {
		return nil, false, err
	}
	defer release()
	edits, commands, existing, err := hc.edits(ctx)
	if err != nil || existing != nil {
		return existing, false, err
	}
	if len(edits) == 0 {
		return nil, false, ErrNothingToSubmit
	}
	paths := make([]string, len(edits))
	tedits := make([]gitsvc.TreeEdit, len(edits))
	for i, e := range edits {
		check := workspace.CheckNewPath // what is written enters the code
		if e.Deleted {
			check = workspace.CheckRelPath
		}
		if err := check(e.Path); err != nil {
			return nil, false, err
		}
		paths[i] = e.Path
		tedits[i] = gitsvc.TreeEdit{Path: e.Path, Content: e.Content, Deleted: e.Deleted}
	}
	sort.Strings(paths)
	message := hc.message
	if message == "" {
		message = defaultMessage(paths)
	}

	head, _, err := s.head(ctx, c)
	if err != nil {
		return nil, false, err
	}
	repo, err := s.fork(ctx, hc.project, hc.author.ID, c, head)
	if err != nil {
		return nil, false, err
	}
	if head != hc.base {
		if c.local {
			// The base came from the folder itself; the fork needs it to
			// tell what changed since.
			if _, err := s.fork(ctx, hc.project, hc.author.ID, c, hc.base); err != nil {
				return nil, false, err
			}
		}
		changed, err := s.git.ChangedPaths(ctx, repo, hc.base, head)
		if err != nil {
			return nil, false, err
		}
		if clash := overlapping(paths, changed); len(clash) > 0 {
			return nil, false, &StaleBaseError{Paths: clash}
		}
	}
	key := hc.key
	if key == "" {
		key = newKey()
	}
	commit, err := s.git.ComposeCommit(ctx, repo, head, tedits, signature(hc.author), message, changeRef(key))
	if err != nil {
		return nil, false, err
	}
	now := s.now()
	ch = &models.Change{ProjectID: hc.project.ID, AuthorID: &hc.author.ID, Message: message,
		BaseCommit: head, CommitSHA: commit, Paths: paths, Status: models.ChangeComposed, CreatedAt: now, UpdatedAt: now,
		CheckDue: &now}
	if hc.sessionID != "" {
		ch.SessionID = &hc.sessionID
	}
	audit, err := commandsJSON(commands)
	if err != nil {
		return nil, false, err
	}
	set := &models.ChangeSet{Kind: "human", AuthorID: &hc.author.ID, CommitSHA: commit, Commands: audit, CreatedAt: now}
	if err := hc.record(ctx, ch, set); err != nil {
		return nil, false, err
	}
	ch.AuthorName = hc.author.Username
	return ch, true, nil
}

// signature is a person as the author of their commits.
func signature(u *models.User) gitsvc.Signature {
	return gitsvc.Signature{Name: u.Username, Email: u.Username + "@users.atelier"}
}

// overlapping returns the edited paths canonical changed: the same path,
// or one inside the other (a file that became a folder, or the reverse).
func overlapping(edited, changed []string) []string {
	var clash []string
	for _, e := range edited {
		for _, c := range changed {
			if e == c || strings.HasPrefix(c, e+"/") || strings.HasPrefix(e, c+"/") {
				clash = append(clash, e)
				break
			}
		}
	}
	return clash
}

// record logs a change's event; the log is informational, so a failure is
// only logged.
func (s *Service) record(ctx context.Context, typ string, ch *models.Change, actor int64, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["changeId"] = ch.ID
	if _, ok := data["status"]; !ok {
		data["status"] = ch.Status
	}
	err := s.events.Record(context.WithoutCancel(ctx), events.Event{Type: typ, ProjectID: ch.ProjectID, ActorID: actor, Data: data})
	if err != nil {
		s.log.Warn("event not recorded", "type", typ, "change", ch.ID, "err", err)
	}
}

// defaultMessage is offered when a person types none.
func defaultMessage(paths []string) string {
	if len(paths) == 1 {
		return "Edit " + paths[0]
	}
	return fmt.Sprintf("Edit %d files", len(paths))
}

// CountByStatus counts the site's Changes by status, for monitoring.
func (s *Service) CountByStatus(ctx context.Context) (map[string]int64, error) {
	return s.db.ChangeCounts(ctx)
}
