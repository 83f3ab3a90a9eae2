package workbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"atelier/fault"
	"atelier/models"
	"atelier/storage"
	"atelier/terminal"
)

// DefaultRecordingBytes bounds a recording when ATELIER_RECORDING_MAX_BYTES
// does not: about an hour of a busy shell. A recording is held in memory
// until it ends, so the instance's shells times this bounds what they
// hold.
const DefaultRecordingBytes = 4 << 20

// MaxRecordings bounds the recordings one person keeps, in all projects:
// each may take ATELIER_RECORDING_MAX_BYTES of the object store.
const MaxRecordings = 100

// ErrTooManyRecordings: the person keeps MaxRecordings recordings.
var ErrTooManyRecordings = fault.New(fault.Limit, "too_many_recordings", "workbench: too many recordings kept",
	"You keep as many terminal recordings as a person may; delete one first.")

// ErrRecordingNotSaved: the recording ended but could not be stored, so
// there is nothing to play.
var ErrRecordingNotSaved = fault.New(fault.Conflict, "recording_not_saved", "workbench: the recording is not saved",
	"This recording is not saved: it is still under way, or it could not be stored.")

// Recordings records the shells of edit sessions, at their owners' word,
// into asciicast files in the object store. A recording is the owner's
// alone until they share it with the project; admins make none.
type Recordings struct {
	db      *models.Store
	shells  *Shells
	objects storage.ObjectStore
	max     int
	now     func() time.Time
	log     *slog.Logger

	mu sync.Mutex
	// saving holds, per terminal, the recording under way here and a
	// channel closed once it is stored.
	saving map[string]*saving
	saves  sync.WaitGroup
}

type saving struct {
	id    int64
	saved chan struct{}
}

// RecordingsOptions are what Recordings work with.
type RecordingsOptions struct {
	DB      *models.Store
	Shells  *Shells
	Objects storage.ObjectStore
	// MaxBytes bounds each recording's file; DefaultRecordingBytes when 0.
	MaxBytes int
	Now      func() time.Time
	Log      *slog.Logger
}

// NewRecordings returns Recordings over opts.
func NewRecordings(opts RecordingsOptions) *Recordings {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultRecordingBytes
	}
	return &Recordings{db: opts.DB, shells: opts.Shells, objects: opts.Objects, max: max(opts.MaxBytes, terminal.MinRecordingBytes),
		now: opts.Now, log: opts.Log, saving: map[string]*saving{}}
}

// Start records the session's running shell tid from now on, until Stop,
// the shell's end or the bound. terminal.ErrRecording: it is being
// recorded already.
func (r *Recordings) Start(ctx context.Context, session Session, tid string) (*models.TerminalRecording, error) {
	t, err := r.shells.Shell(session, tid)
	if err != nil {
		return nil, err
	}
	sess := session.Identity()
	title := "Terminal"
	if sess.Project != nil {
		title = sess.Project.Name + " · terminal"
	}
	rec, err := t.Record(r.max, title)
	if err != nil {
		return nil, err
	}
	row := &models.TerminalRecording{ProjectID: sess.ProjectID, UserID: sess.UserID, SessionID: sess.ID,
		TerminalID: tid, StartedAt: r.now()}
	if err := r.db.StartRecording(ctx, row, MaxRecordings); err != nil {
		t.StopRecording()
		switch {
		case errors.Is(err, models.ErrTooManyRecordings):
			return nil, ErrTooManyRecordings
		case errors.Is(err, models.ErrConflict):
			return nil, terminal.ErrRecording
		}
		return nil, err
	}
	s := &saving{id: row.ID, saved: make(chan struct{})}
	r.mu.Lock()
	r.saving[tid] = s
	r.mu.Unlock()
	r.saves.Add(1)
	go r.save(rec, tid, s)
	return row, nil
}

// Stop ends the recording of the session's shell tid and returns once it
// is stored (or ctx ends). terminal.ErrNotRecording: none is under way.
func (r *Recordings) Stop(ctx context.Context, session Session, tid string) error {
	t, err := r.shells.Shell(session, tid)
	if err != nil {
		return err
	}
	r.mu.Lock()
	s := r.saving[tid]
	r.mu.Unlock()
	if _, err := t.StopRecording(); err != nil {
		return err
	}
	if s != nil {
		select {
		case <-s.saved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// save stores a recording once it has ended, and records how it ended.
func (r *Recordings) save(rec *terminal.Recording, tid string, s *saving) {
	defer r.saves.Done()
	defer close(s.saved)
	defer func() {
		r.mu.Lock()
		if r.saving[tid] == s {
			delete(r.saving, tid)
		}
		r.mu.Unlock()
	}()
	<-rec.Done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cast := rec.Cast()
	key := "recordings/" + strconv.FormatInt(s.id, 10) + ".cast"
	if err := r.objects.Put(ctx, key, bytes.NewReader(cast), int64(len(cast))); err != nil {
		r.log.Error("a terminal recording could not be stored", "recording", s.id, "err", err)
		key = ""
	}
	if err := r.db.FinishRecording(ctx, s.id, key, int64(len(cast)), rec.Truncated(), r.now()); err != nil {
		r.log.Error("a terminal recording's end not recorded", "recording", s.id, "err", err)
	}
}

// Wait returns once every recording that has ended is stored. A server
// that stops closes its terminals, which ends their recordings, then
// waits here.
func (r *Recordings) Wait() { r.saves.Wait() }

// Of lists the recordings the session's owner made in it, newest first.
func (r *Recordings) Of(ctx context.Context, session Session) ([]models.TerminalRecording, error) {
	sess := session.Identity()
	return r.db.RecordingsOf(ctx, sess.ID, sess.UserID)
}

// Shared lists the recordings shared with a project (the caller checked
// that the person reads it).
func (r *Recordings) Shared(ctx context.Context, projectID int64) ([]models.TerminalRecording, error) {
	return r.db.SharedRecordings(ctx, projectID)
}

// Get returns recording id of a project when user may see it: their own,
// or one shared with the project (the caller checked that user reads it).
// Another's unshared recording is models.ErrNotFound, as one that does not
// exist.
func (r *Recordings) Get(ctx context.Context, user *models.User, projectID, id int64) (*models.TerminalRecording, error) {
	rec, err := r.db.Recording(ctx, projectID, id)
	if err != nil {
		return nil, err
	}
	if rec.UserID != user.ID && !rec.Shared {
		return nil, models.ErrNotFound
	}
	return rec, nil
}

// Open opens a saved recording's asciicast file for user (see Get).
func (r *Recordings) Open(ctx context.Context, user *models.User, projectID, id int64) (*models.TerminalRecording, io.ReadCloser, error) {
	rec, err := r.Get(ctx, user, projectID, id)
	if err != nil {
		return nil, nil, err
	}
	if rec.State != models.RecordingSaved || rec.ObjectKey == nil {
		return nil, nil, ErrRecordingNotSaved
	}
	body, err := r.objects.Get(ctx, *rec.ObjectKey)
	if err != nil {
		return nil, nil, fmt.Errorf("workbench: recording %d: %w", id, err)
	}
	return rec, body, nil
}

// Share shares one of user's saved recordings with its project, or stops
// sharing it.
func (r *Recordings) Share(ctx context.Context, user *models.User, id int64, shared bool) error {
	return r.db.ShareRecording(ctx, id, user.ID, shared)
}

// Delete deletes one of user's finished recordings; its file goes with the
// collector's next pass.
func (r *Recordings) Delete(ctx context.Context, user *models.User, id int64) error {
	return r.db.DeleteRecording(ctx, id, user.ID)
}
