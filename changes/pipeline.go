package changes

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"atelier/auth"
	"atelier/editsession"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
)

// When a check that could not run is tried again: soon for a full
// instance, later for anything else (the month's sandbox time used up, the
// database away), so a Change never hangs in verifying until a restart.
const (
	retryBusy  = 5 * time.Second
	retryLater = time.Minute
)

// queue asks Run to verify the change.
func (s *Service) queue(id int64) {
	s.mu.Lock()
	s.pending = append(s.pending, id)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Service) next() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return 0, false
	}
	id := s.pending[0]
	s.pending = s.pending[1:]
	return id, true
}

// Resume queues what a previous run left unverified: Changes in
// verifying (the server stopped during their check) and composed ones
// that wait for nothing. The server calls it at start, before Run.
func (s *Service) Resume(ctx context.Context) (int, error) {
	cs, err := s.db.ChangesByStatus(ctx, 0, models.ChangeVerifying, models.ChangeComposed)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		if c.Status == models.ChangeComposed && c.WaitReason != nil {
			continue
		}
		s.queue(c.ID)
		n++
	}
	return n, nil
}

// Run verifies queued changes one after another until ctx ends.
func (s *Service) Run(ctx context.Context) {
	for {
		for {
			id, ok := s.next()
			if !ok {
				break
			}
			if ctx.Err() != nil {
				return
			}
			if err := s.verify(ctx, id); err != nil && ctx.Err() == nil {
				wait := retryLater
				if errors.Is(err, editsession.ErrSandboxBusy) {
					wait = retryBusy
				} else {
					s.log.Warn("change not verified; trying again", "change", id, "in", wait, "err", err)
				}
				time.AfterFunc(wait, func() { s.queue(id) })
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
	}
}

// verify runs the project's check command on the change's commit and
// records the evidence, or marks the change as waiting for an approval
// when the project has no check command.
func (s *Service) verify(ctx context.Context, id int64) error {
	ch, err := s.db.ChangeByID(ctx, id)
	if err != nil {
		return err
	}
	if ch.Status != models.ChangeComposed && ch.Status != models.ChangeVerifying {
		return nil
	}
	p, err := s.db.ProjectByID(ctx, ch.ProjectID)
	if err != nil {
		return err
	}
	now := s.now()
	if p.CheckCommand == nil {
		wait := models.WaitApproval
		err := s.db.MoveChange(ctx, id, models.ChangeUpdate{From: []string{ch.Status}, To: ch.Status, WaitReason: &wait, At: now})
		if errors.Is(err, models.ErrChangeMoved) {
			return nil
		}
		if err == nil {
			ch.WaitReason = &wait
			s.record(ctx, events.ChangeWaiting, ch, 0, map[string]any{"reason": wait})
		}
		return err
	}
	command := *p.CheckCommand
	err = s.db.MoveChange(ctx, id, models.ChangeUpdate{From: []string{models.ChangeComposed, models.ChangeVerifying}, To: models.ChangeVerifying, At: now})
	if errors.Is(err, models.ErrChangeMoved) {
		return nil
	}
	if err != nil {
		return err
	}
	if ch.Status != models.ChangeVerifying {
		ch.Status = models.ChangeVerifying
		s.record(ctx, events.ChangeMoved, ch, 0, nil)
	}
	if ch.AuthorID == nil {
		return errors.New("changes: the change's author is gone, and with them its workspace fork")
	}
	repo, err := s.git.OpenBare(workspaceFork(ch.ProjectID, *ch.AuthorID))
	if err != nil {
		return err
	}
	res, err := s.runtime.RunCheck(ctx, p, repo, ch.CommitSHA, command, ch.ID)
	if err != nil {
		return err
	}
	tail := strings.ToValidUTF8(string(res.Output), "\uFFFD")
	for len(tail) > editsession.CommandTail {
		_, size := utf8.DecodeRuneInString(tail)
		tail = tail[size:]
	}
	exit, dur := res.ExitCode, res.DurationMS
	ev := &models.Evidence{ChangeID: id, CommitSHA: ch.CommitSHA, Kind: models.EvidenceCheck, Passed: exit == 0,
		Command: &command, ExitCode: &exit, DurationMS: &dur, OutputTail: &tail, CreatedAt: s.now()}
	to, typ := models.ChangeVerified, events.ChangeVerified
	if exit != 0 {
		to, typ = models.ChangeFailed, events.ChangeFailed
	}
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		if err := tx.AddEvidence(ctx, ev); err != nil {
			return err
		}
		// Only the commit that was checked: a re-compose meanwhile is
		// verified on its own.
		cur, err := tx.LockChange(ctx, id)
		if err != nil {
			return err
		}
		if cur.CommitSHA != ch.CommitSHA {
			return models.ErrChangeMoved
		}
		return tx.MoveChange(ctx, id, models.ChangeUpdate{From: []string{models.ChangeVerifying}, To: to, At: s.now()})
	})
	if errors.Is(err, models.ErrChangeMoved) {
		return nil // withdrawn or re-composed while it ran
	}
	if err != nil {
		return err
	}
	ch.Status = to
	s.record(ctx, typ, ch, 0, map[string]any{"exitCode": exit, "durationMs": dur})
	return nil
}

// Approve records an owner's or admin's approval of a change that waits
// for one (the project has no check command), which verifies it.
func (s *Service) Approve(ctx context.Context, acc *projects.Access, id int64) (*models.Change, error) {
	if !acc.Can(auth.CodeEdit) {
		return nil, auth.ErrForbidden
	}
	if acc.Project.Archived() {
		return nil, projects.ErrArchived
	}
	ch, err := s.changeOf(ctx, acc, id)
	if err != nil {
		return nil, err
	}
	if ch.WaitReason == nil || *ch.WaitReason != models.WaitApproval ||
		(ch.Status != models.ChangeComposed && ch.Status != models.ChangeVerifying) {
		return nil, ErrNotWaiting
	}
	uid := acc.User.ID
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		if err := tx.AddEvidence(ctx, &models.Evidence{ChangeID: id, CommitSHA: ch.CommitSHA, Kind: models.EvidenceApproval,
			Passed: true, ApprovedBy: &uid, CreatedAt: s.now()}); err != nil {
			return err
		}
		return tx.MoveChange(ctx, id, models.ChangeUpdate{From: []string{ch.Status}, To: models.ChangeVerified, At: s.now()})
	})
	if errors.Is(err, models.ErrChangeMoved) {
		return nil, ErrNotWaiting
	}
	if err != nil {
		return nil, err
	}
	ch.Status, ch.WaitReason = models.ChangeVerified, nil
	s.record(ctx, events.ChangeVerified, ch, uid, map[string]any{"approvedBy": acc.User.Username})
	return ch, nil
}

// Withdraw takes a change out of the pipeline; only its author may.
func (s *Service) Withdraw(ctx context.Context, acc *projects.Access, id int64) (*models.Change, error) {
	ch, err := s.changeOf(ctx, acc, id)
	if err != nil {
		return nil, err
	}
	if ch.AuthorID == nil || *ch.AuthorID != acc.User.ID {
		return nil, ErrNotAuthor
	}
	err = s.db.MoveChange(ctx, id, models.ChangeUpdate{
		From: []string{models.ChangeComposed, models.ChangeVerifying, models.ChangeVerified, models.ChangeFailed},
		To:   models.ChangeWithdrawn, At: s.now()})
	if errors.Is(err, models.ErrChangeMoved) {
		return nil, ErrFinished
	}
	if err != nil {
		return nil, err
	}
	ch.Status, ch.WaitReason = models.ChangeWithdrawn, nil
	s.record(ctx, events.ChangeMoved, ch, acc.User.ID, nil)
	return ch, nil
}

// Release advances canonical to a verified change's commit, under
// canonical's write reservation, and only by fast-forward from the
// change's base. When canonical moved since, the change is composed again
// on the new head and verified again (or superseded when canonical changed
// its paths: *StaleBaseError); the returned change says which. A Local
// folder moves only when its work tree is clean and its branch is still at
// the base; otherwise the change waits with reason dirty_worktree.
func (s *Service) Release(ctx context.Context, acc *projects.Access, id int64) (*models.Change, error) {
	ch, err := s.release(ctx, acc, id)
	if err != nil || ch.Status != models.ChangeReleased || acc.Project.WorkspaceMode == models.ModeLocal {
		return ch, err
	}
	// After the reservation is let go: readers of canonical need not wait
	// for the upload.
	repo, err := s.git.OpenBare(projects.CanonicalName(ch.ProjectID))
	if err == nil {
		_, err = s.code.Publish(ctx, repo, ch.CommitSHA)
	}
	if err != nil {
		// Reads fall back to git until a later publish succeeds.
		s.log.Warn("released commit not published", "project", ch.ProjectID, "commit", ch.CommitSHA, "err", err)
	}
	return ch, nil
}

// release is Release under canonical's write reservation.
func (s *Service) release(ctx context.Context, acc *projects.Access, id int64) (*models.Change, error) {
	if !acc.Can(auth.CodeEdit) {
		return nil, auth.ErrForbidden
	}
	if acc.Project.Archived() {
		return nil, projects.ErrArchived
	}
	if _, err := s.changeOf(ctx, acc, id); err != nil {
		return nil, err
	}
	c, err := s.openCanonical(ctx, acc.Project)
	if err != nil {
		return nil, err
	}
	defer c.closer()
	ctx, release, err := s.git.HoldRepo(ctx, c.repo, true)
	if err != nil {
		return nil, err
	}
	defer release()
	// Read again under the reservation: another release may have moved it.
	ch, err := s.db.ChangeByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if ch.Status != models.ChangeVerified {
		return nil, ErrNotVerified
	}
	if ch.AuthorID == nil {
		return nil, ErrFinished
	}
	head, branch, err := s.head(ctx, c)
	if err != nil {
		return nil, err
	}
	fork, err := s.git.OpenBare(workspaceFork(ch.ProjectID, *ch.AuthorID))
	if err != nil {
		return nil, err
	}
	if c.local {
		return s.releaseLocal(ctx, acc, c, fork, ch, head, branch)
	}
	if head == ch.CommitSHA {
		// A release moved the branch and stopped before its row: finish it.
		return s.markReleased(ctx, acc, ch, c, false)
	}
	if head != ch.BaseCommit {
		return s.recompose(ctx, acc, c, fork, ch, head)
	}
	if err := s.git.CopyCommit(ctx, fork, c.repo, ch.CommitSHA, ch.BaseCommit); err != nil {
		return nil, err
	}
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, ch.ProjectID); err != nil {
			return err
		}
		// The row is released and canonical recorded before the branch
		// moves; a failing move rolls both back.
		if err := s.released(ctx, tx, ch); err != nil {
			return err
		}
		if err := tx.SetCanonicalCommit(ctx, ch.ProjectID, ch.CommitSHA); err != nil {
			return err
		}
		return s.git.MoveBranch(ctx, c.repo, "main", ch.CommitSHA, head)
	})
	if err != nil {
		return nil, err
	}
	return s.afterRelease(ctx, acc, ch, c)
}

// released moves the change to released in tx.
func (s *Service) released(ctx context.Context, tx *models.Store, ch *models.Change) error {
	now := s.now()
	err := tx.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeReleased, ReleasedAt: &now, At: now})
	if errors.Is(err, models.ErrChangeMoved) {
		return ErrNotVerified
	}
	ch.Status, ch.WaitReason, ch.ReleasedAt = models.ChangeReleased, nil, &now
	return err
}

// markReleased records a release whose branch move already happened.
func (s *Service) markReleased(ctx context.Context, acc *projects.Access, ch *models.Change, c *canonical, local bool) (*models.Change, error) {
	err := s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, ch.ProjectID); err != nil {
			return err
		}
		if err := s.released(ctx, tx, ch); err != nil {
			return err
		}
		if local {
			return nil
		}
		return tx.SetCanonicalCommit(ctx, ch.ProjectID, ch.CommitSHA)
	})
	if err != nil {
		return nil, err
	}
	return s.afterRelease(ctx, acc, ch, c)
}

// afterRelease tells the event log; Release publishes the tree.
func (s *Service) afterRelease(ctx context.Context, acc *projects.Access, ch *models.Change, _ *canonical) (*models.Change, error) {
	s.record(ctx, events.ChangeReleased, ch, acc.User.ID, map[string]any{"commit": ch.CommitSHA})
	return ch, nil
}

// recompose composes the change again on canonical's head, which moved
// since its base, and sends it to be verified again: its evidence was for
// another commit. When canonical changed its paths it is superseded.
func (s *Service) recompose(ctx context.Context, acc *projects.Access, c *canonical, fork *gitsvc.Repo, ch *models.Change, head string) (*models.Change, error) {
	changed, err := s.git.ChangedPaths(ctx, fork, ch.BaseCommit, head)
	if err != nil {
		return nil, err
	}
	if clash := overlapping(ch.Paths, changed); len(clash) > 0 {
		err := s.db.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeSuperseded, At: s.now()})
		if err != nil {
			return nil, err
		}
		ch.Status = models.ChangeSuperseded
		s.record(ctx, events.ChangeMoved, ch, acc.User.ID, map[string]any{"paths": clash})
		return nil, &StaleBaseError{Paths: clash}
	}
	edits, err := s.git.Diff(ctx, fork, ch.BaseCommit, ch.CommitSHA)
	if err != nil {
		return nil, err
	}
	author, err := s.authorOf(ctx, ch)
	if err != nil {
		return nil, err
	}
	commit, err := s.git.ComposeCommit(ctx, fork, head, edits, author, ch.Message, changeRef(newKey()))
	if err != nil {
		return nil, err
	}
	err = s.db.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeComposed,
		Base: head, Commit: commit, At: s.now()})
	if err != nil {
		return nil, err
	}
	ch.Status, ch.BaseCommit, ch.CommitSHA = models.ChangeComposed, head, commit
	s.record(ctx, events.ChangeMoved, ch, acc.User.ID, map[string]any{"recomposed": true, "base": head})
	s.queue(ch.ID)
	return ch, nil
}

func (s *Service) authorOf(ctx context.Context, ch *models.Change) (gitsvc.Signature, error) {
	u, err := s.db.UserByID(ctx, *ch.AuthorID)
	if err != nil {
		return gitsvc.Signature{}, err
	}
	return signature(u), nil
}

// releaseLocal moves a Local folder's branch and work tree to the change,
// when the folder is as the change expects.
func (s *Service) releaseLocal(ctx context.Context, acc *projects.Access, c *canonical, fork *gitsvc.Repo, ch *models.Change, head, branch string) (*models.Change, error) {
	if head == ch.CommitSHA {
		return s.markReleased(ctx, acc, ch, c, true)
	}
	clean := false
	if branch != "" && head == ch.BaseCommit {
		var err error
		if clean, err = s.git.WorkTreeClean(ctx, c.repo); err != nil {
			return nil, err
		}
	}
	if !clean {
		return s.waitDirty(ctx, acc, ch)
	}
	if err := s.git.CopyCommit(ctx, fork, c.repo, ch.CommitSHA, ch.BaseCommit); err != nil {
		return nil, err
	}
	err := s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, ch.ProjectID); err != nil {
			return err
		}
		if err := s.released(ctx, tx, ch); err != nil {
			return err
		}
		return s.git.FastForwardWorkTree(ctx, c.repo, branch, head, ch.CommitSHA)
	})
	if err != nil {
		return nil, err
	}
	return s.afterRelease(ctx, acc, ch, c)
}

// waitDirty marks the change as waiting for the folder.
func (s *Service) waitDirty(ctx context.Context, acc *projects.Access, ch *models.Change) (*models.Change, error) {
	wait := models.WaitDirtyWorktree
	err := s.db.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeVerified, WaitReason: &wait, At: s.now()})
	if err != nil {
		return nil, err
	}
	ch.WaitReason = &wait
	s.record(ctx, events.ChangeWaiting, ch, acc.User.ID, map[string]any{"reason": wait})
	return ch, nil
}

// changeOf loads a change of the caller's project; another project's is
// not found.
func (s *Service) changeOf(ctx context.Context, acc *projects.Access, id int64) (*models.Change, error) {
	ch, err := s.db.ChangeByID(ctx, id)
	if errors.Is(err, models.ErrNotFound) || (err == nil && ch.ProjectID != acc.Project.ID) {
		return nil, ErrNotFound
	}
	return ch, err
}
