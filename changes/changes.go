// Package changes carries a person's edits to canonical: a submit (or the
// Code page's single-file edit) records one Change with one human
// ChangeSet, composed on the current canonical; the Change is verified by
// the project's check command in the sandbox (or approved by an owner or
// admin), and only a verified Change whose base is still canonical is
// released onto it. Nothing else of Atelier advances canonical with
// people's edits.
package changes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"atelier/editsession"
	"atelier/events"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/storage/codestore"
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
	ErrNoRepository    = fault.New(fault.Conflict, "no_base", "changes: the project's folder is not a git repository with a commit", "The project's folder is not a git repository with a commit.")
	ErrNotEditable     = fault.New(fault.Unsupported, "not_editable", "changes: only text files up to 1 MiB are edited here", "Only text files up to 1 MiB are edited here.")
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
	db      *models.Store
	git     *gitsvc.Service
	code    *codestore.Store
	ws      *workspace.Workspaces
	edits   *editsession.Sessions
	runtime *editsession.Runtime
	events  *events.Recorder
	now     func() time.Time
	log     *slog.Logger

	mu      sync.Mutex
	pending []int64       // changes to verify, in order
	wake    chan struct{} // a change was queued
}

// New returns the pipeline; Run verifies what it queues.
func New(db *models.Store, git *gitsvc.Service, code *codestore.Store, ws *workspace.Workspaces,
	edits *editsession.Sessions, runtime *editsession.Runtime, ev *events.Recorder, now func() time.Time, log *slog.Logger) *Service {
	return &Service{db: db, git: git, code: code, ws: ws, edits: edits, runtime: runtime, events: ev, now: now, log: log,
		wake: make(chan struct{}, 1)}
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
	base      string // the commit the edits were made on
	edits     []Edit
	message   string
	commands  []models.SessionCommand
}

// recordHumanChange is the one way edits become a Change with one human
// ChangeSet. Under canonical's write reservation it reads canonical's
// head; when canonical moved since the base, the paths it changed must not
// be edited ones (else *StaleBaseError) and the commit is composed on the
// head instead. The commit is written in the person's workspace fork
// without a work tree, authored by them with their message, and recorded
// through tx.
func (s *Service) recordHumanChange(ctx context.Context, tx *models.Store, hc humanChange) (*models.Change, error) {
	if len(hc.edits) == 0 {
		return nil, ErrNothingToSubmit
	}
	paths := make([]string, len(hc.edits))
	tedits := make([]gitsvc.TreeEdit, len(hc.edits))
	for i, e := range hc.edits {
		if err := workspace.CheckRelPath(e.Path); err != nil {
			return nil, err
		}
		paths[i] = e.Path
		tedits[i] = gitsvc.TreeEdit{Path: e.Path, Content: e.Content, Deleted: e.Deleted}
	}
	sort.Strings(paths)

	c, err := s.openCanonical(ctx, hc.project)
	if err != nil {
		return nil, err
	}
	defer c.closer()
	ctx, release, err := s.git.HoldRepo(ctx, c.repo, true)
	if err != nil {
		return nil, err
	}
	defer release()
	head, _, err := s.head(ctx, c)
	if err != nil {
		return nil, err
	}
	repo, err := s.fork(ctx, hc.project, hc.author.ID, c, head)
	if err != nil {
		return nil, err
	}
	if head != hc.base {
		if c.local {
			// The base came from the folder itself; the fork needs it to
			// tell what changed since.
			if _, err := s.fork(ctx, hc.project, hc.author.ID, c, hc.base); err != nil {
				return nil, err
			}
		}
		changed, err := s.git.ChangedPaths(ctx, repo, hc.base, head)
		if err != nil {
			return nil, err
		}
		if clash := overlapping(paths, changed); len(clash) > 0 {
			return nil, &StaleBaseError{Paths: clash}
		}
	}
	key := newKey()
	if hc.sessionID != "" {
		key = strings.TrimPrefix(hc.sessionID, "edit_")
	}
	commit, err := s.git.ComposeCommit(ctx, repo, head, tedits, signature(hc.author), hc.message, changeRef(key))
	if err != nil {
		return nil, err
	}
	now := s.now()
	ch := &models.Change{ProjectID: hc.project.ID, AuthorID: &hc.author.ID, Message: hc.message,
		BaseCommit: head, CommitSHA: commit, Paths: paths, Status: models.ChangeComposed, CreatedAt: now, UpdatedAt: now}
	if hc.sessionID != "" {
		ch.SessionID = &hc.sessionID
	}
	commands, err := commandsJSON(hc.commands)
	if err != nil {
		return nil, err
	}
	set := &models.ChangeSet{Kind: "human", AuthorID: &hc.author.ID, CommitSHA: commit, Commands: commands, CreatedAt: now}
	if err := tx.CreateChange(ctx, ch, set); err != nil {
		return nil, err
	}
	ch.AuthorName = hc.author.Username
	return ch, nil
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
