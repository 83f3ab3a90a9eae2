package changes

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"atelier/auth"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
	"atelier/workbench"
)

// When a check that could not run is tried again: soon for a full
// instance, later for anything else (the month's sandbox time used up, the
// database away), so a Change never hangs in verifying.
const (
	retryBusy  = 5 * time.Second
	retryLater = time.Minute
)

// The verifier's defaults (Options.ClaimFor, Options.PollEvery): an
// instance that stops has its check taken again within half a minute, and
// a Change queued elsewhere, or due for a retry, waits at most a second
// when nothing wakes the verifier.
const (
	defaultClaimFor  = 30 * time.Second
	defaultPollEvery = time.Second
)

// queued tells the verifiers that a Change was queued (its row is due
// already): this instance's at once, the others through Options.Queued.
func (s *Service) queued() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if s.queuedHook != nil {
		s.queuedHook()
	}
}

// Run verifies the due Changes of every instance, one check at a time,
// until ctx ends. It claims each check in the database, so that whichever
// instances poll, one runs it; it looks for due checks when woken, and at
// least every PollEvery: that is how a retry's time comes, and how a check
// whose instance stopped is found once its claim expired. No timer in
// memory decides anything, so a restart loses no retry. A check cut short
// by the end of ctx is let go, due at once, for the next instance to poll.
func (s *Service) Run(ctx context.Context) {
	poll := time.NewTicker(s.pollEvery)
	defer poll.Stop()
	for {
		for ctx.Err() == nil && s.verifyNext(ctx) {
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-s.wakeups:
		case <-poll.C:
		}
	}
}

// verifyNext claims the next due check and runs it; false when none was
// due, or the database could not say.
func (s *Service) verifyNext(ctx context.Context) bool {
	c, err := s.db.ClaimCheck(ctx, s.instance, s.now(), s.claimFor)
	if errors.Is(err, models.ErrNotFound) {
		return false
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("changes to verify not read; polling again", "err", err)
		}
		return false
	}
	if c.Before != "" {
		s.log.Info("a check whose instance stopped renewing its claim is taken over",
			"change", c.ChangeID, "from", c.Before, "attempt", c.Attempts)
	}
	s.runClaimed(ctx, c)
	return true
}

// settleWithin bounds the release of a claim after its check.
const settleWithin = 10 * time.Second

// runClaimed verifies the claimed Change while the claim is renewed, then
// settles the claim: verify took the Change out of the queue when it
// recorded something; otherwise the check is let go, due again at once or
// after a retry's wait. A claim lost meanwhile is left to its new holder.
func (s *Service) runClaimed(ctx context.Context, c *models.CheckClaim) {
	id := c.ChangeID
	cctx, cancel := context.WithCancelCause(ctx)
	renewing := make(chan struct{})
	go func() { defer close(renewing); s.keepClaim(cctx, cancel, id) }()
	err := s.verify(cctx, id)
	lost := errors.Is(context.Cause(cctx), models.ErrClaimLost)
	cancel(nil)
	<-renewing
	if err == nil {
		return
	}
	if lost || errors.Is(err, models.ErrClaimLost) {
		s.log.Info("the claim on a check was lost (taken over, or the Change left the queue); this run records nothing", "change", id)
		return
	}
	due := s.now()
	switch {
	case ctx.Err() != nil:
		// The server stops: the next instance to poll takes it at once.
	case errors.Is(err, models.ErrChangeMoved):
		// It moved while it was checked; the row says whether anything
		// is still to verify.
	case errors.Is(err, workbench.ErrSandboxBusy):
		due = due.Add(retryBusy)
	default:
		due = due.Add(retryLater)
		s.log.Warn("change not verified; trying again", "change", id, "in", retryLater, "attempt", c.Attempts, "err", err)
	}
	bg, done := context.WithTimeout(context.WithoutCancel(ctx), settleWithin)
	defer done()
	if err := s.db.ReleaseCheck(bg, id, s.instance, due); err != nil && !errors.Is(err, models.ErrClaimLost) {
		s.log.Warn("claim on a check not let go; it is taken again once it expires", "change", id, "err", err)
	}
}

// keepClaim renews the claim on the change's check every renewEvery until
// ctx ends. When the claim is lost (it expired, say the database was away
// for longer, and another instance took it; or the Change was withdrawn)
// it cancels the check with ErrClaimLost: someone else runs it now.
func (s *Service) keepClaim(ctx context.Context, lose context.CancelCauseFunc, id int64) {
	t := time.NewTicker(s.renewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.db.RenewCheck(ctx, id, s.instance, s.now().Add(s.claimFor))
		if errors.Is(err, models.ErrClaimLost) {
			lose(err)
			return
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("claim on a check not renewed", "change", id, "err", err)
		}
	}
}

// verify runs the project's check command on the change's commit and
// records the evidence, or marks the change as waiting for an approval
// when the project has no check command; either takes the Change out of
// the queue, in the same transaction, only while this instance holds the
// claim on its check (else models.ErrClaimLost and nothing is recorded).
func (s *Service) verify(ctx context.Context, id int64) error {
	ch, err := s.db.ChangeByID(ctx, id)
	if err != nil {
		return err
	}
	if ch.Status != models.ChangeComposed && ch.Status != models.ChangeVerifying {
		return nil // it left the queue meanwhile, and the claim with it
	}
	p, err := s.db.ProjectByID(ctx, ch.ProjectID)
	if err != nil {
		return err
	}
	now := s.now()
	if p.CheckCommand == nil {
		wait := models.WaitApproval
		err := s.db.Tx(ctx, func(tx *models.Store) error {
			if err := tx.FinishCheck(ctx, id, s.instance); err != nil {
				return err
			}
			return tx.MoveChange(ctx, id, models.ChangeUpdate{From: []string{ch.Status}, To: ch.Status, WaitReason: &wait, At: now})
		})
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
	res, err := s.checks.RunCheck(ctx, p, repo, ch.CommitSHA, command, ch.ID)
	if err != nil {
		return err
	}
	tail := strings.ToValidUTF8(string(res.Output), "\uFFFD")
	for len(tail) > workbench.CommandTail {
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
		// The claim first, which locks the row: a check another
		// instance took over meanwhile is recorded by that one alone.
		if err := tx.FinishCheck(ctx, id, s.instance); err != nil {
			return err
		}
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
	if err != nil {
		return err // withdrawn meanwhile: the claim went with the queue
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
		if err := s.mayApprove(ctx, tx, acc, ch); err != nil {
			return err
		}
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

// mayApprove is the four-eyes rule: an approval stands for review by
// someone other than the author, so where the project has two or more
// owners and admins, the author's own approval is refused. Where the
// author is its only owner or admin, nobody else could ever approve, and
// refusing would leave their Changes stuck without a check command; the
// approval then records that they looked again, as before. The count is
// read in the approval's transaction; a person added a moment later does
// not undo an approval already given.
func (s *Service) mayApprove(ctx context.Context, tx *models.Store, acc *projects.Access, ch *models.Change) error {
	if ch.AuthorID == nil || *ch.AuthorID != acc.User.ID {
		return nil
	}
	n, err := tx.OwnersAndAdmins(ctx, acc.Project.ID)
	if err != nil {
		return err
	}
	if n >= 2 {
		return ErrOwnChange
	}
	return nil
}

// OthersApprove reports whether someone other than acc's person must
// approve ch, because they wrote it and the project has others who may
// (mayApprove), so the page offers them no Approve.
func (s *Service) OthersApprove(ctx context.Context, acc *projects.Access, ch *models.Change) (bool, error) {
	err := s.mayApprove(ctx, s.db, acc, ch)
	if errors.Is(err, ErrOwnChange) {
		return true, nil
	}
	return false, err
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
	// Canonical grows by releases too: the project's bound holds here as
	// at an import, and the Change stays verified.
	size, err := s.git.TreeBytes(ctx, c.repo, ch.CommitSHA)
	if err != nil {
		return nil, err
	}
	if err := s.code.CheckProjectBytes(size); err != nil {
		return nil, err
	}
	// The branch moves first, under the reservation, and the rows are
	// recorded after it in a transaction of SQL alone. When they cannot be
	// (the Change was withdrawn meanwhile, the database failed), the branch
	// goes back, so canonical never holds a Change that was not released;
	// a crash between the two leaves what the next release finishes
	// (markReleased).
	if err := s.git.MoveBranch(ctx, c.repo, "main", ch.CommitSHA, head); err != nil {
		return nil, err
	}
	err = s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, ch.ProjectID); err != nil {
			return err
		}
		if err := s.released(ctx, tx, ch); err != nil {
			return err
		}
		return tx.SetCanonicalCommit(ctx, ch.ProjectID, ch.CommitSHA)
	})
	if err != nil {
		if back := s.git.MoveBranch(context.WithoutCancel(ctx), c.repo, "main", head, ch.CommitSHA); back != nil {
			s.log.Error("canonical moved to a change whose release was not recorded", "project", ch.ProjectID, "change", ch.ID, "err", back)
		}
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
	now := s.now()
	err = s.db.MoveChange(ctx, ch.ID, models.ChangeUpdate{From: []string{models.ChangeVerified}, To: models.ChangeComposed,
		Base: head, Commit: commit, Check: &now, At: now})
	if err != nil {
		return nil, err
	}
	ch.Status, ch.BaseCommit, ch.CommitSHA = models.ChangeComposed, head, commit
	s.record(ctx, events.ChangeMoved, ch, acc.User.ID, map[string]any{"recomposed": true, "base": head})
	s.queued()
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
	// As for canonical: the folder moves first, under the reservation, and
	// the release is recorded after it in a transaction of SQL alone. When
	// it cannot be, the folder moves back, and read-tree refuses to
	// overwrite anything that is not the change's, so what the person
	// touched meanwhile is never lost: a refusal leaves the folder at the
	// change, which the next release of a Change still verified records
	// (head == CommitSHA above), as after a crash between the two.
	if err := s.git.MoveWorkTree(ctx, c.repo, branch, head, ch.CommitSHA); err != nil {
		return nil, err
	}
	err := s.db.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockProject(ctx, ch.ProjectID); err != nil {
			return err
		}
		return s.released(ctx, tx, ch)
	})
	if err != nil {
		if back := s.git.MoveWorkTree(context.WithoutCancel(ctx), c.repo, branch, ch.CommitSHA, head); back != nil {
			s.log.Error("a local folder moved to a change whose release was not recorded", "project", ch.ProjectID, "change", ch.ID, "err", back)
		}
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
