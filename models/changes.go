package models

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Change statuses, as stored. A Change moves composed → verifying →
// verified | failed → released, or ends withdrawn or superseded; the
// table's trigger refuses any other move.
const (
	ChangeComposed   = "composed"
	ChangeVerifying  = "verifying"
	ChangeVerified   = "verified"
	ChangeFailed     = "failed"
	ChangeReleased   = "released"
	ChangeWithdrawn  = "withdrawn"
	ChangeSuperseded = "superseded"
)

// Why a Change waits, as stored in wait_reason.
const (
	WaitApproval      = "approval"
	WaitDirtyWorktree = "dirty_worktree"
)

// Evidence kinds.
const (
	EvidenceCheck    = "check"
	EvidenceApproval = "approval"
)

// changeMoves are the moves the changes_guard trigger allows, mirrored so a
// refused move is told before PostgreSQL is asked.
var changeMoves = map[string][]string{
	ChangeComposed:  {ChangeVerifying, ChangeVerified, ChangeWithdrawn, ChangeSuperseded},
	ChangeVerifying: {ChangeVerified, ChangeFailed, ChangeWithdrawn, ChangeSuperseded},
	ChangeVerified:  {ChangeReleased, ChangeComposed, ChangeWithdrawn, ChangeSuperseded},
	ChangeFailed:    {ChangeWithdrawn, ChangeSuperseded},
}

// CanMove reports whether a Change may go from one status to another.
func CanMove(from, to string) bool {
	if from == to {
		return true
	}
	for _, s := range changeMoves[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Paths is a list of repository paths kept as a JSON array.
type Paths []string

// Value stores the paths as JSON.
func (p Paths) Value() (driver.Value, error) {
	if p == nil {
		p = Paths{}
	}
	b, err := json.Marshal([]string(p))
	return string(b), err
}

// Scan reads the paths from JSON.
func (p *Paths) Scan(v any) error {
	var b []byte
	switch v := v.(type) {
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("models: paths from %T", v)
	}
	return json.Unmarshal(b, (*[]string)(p))
}

// Change is one reviewed unit of edits on its way to canonical.
type Change struct {
	ID         int64      `json:"id"`
	ProjectID  int64      `json:"projectId"`
	AuthorID   *int64     `json:"authorId"`
	SessionID  *string    `json:"sessionId,omitempty"`
	Message    string     `json:"message"`
	BaseCommit string     `json:"base"`
	CommitSHA  string     `json:"commit" gorm:"column:commit_sha"`
	Paths      Paths      `json:"paths" gorm:"type:jsonb"`
	Status     string     `json:"status" gorm:"check:changes_status_known,status IN ('composed', 'verifying', 'verified', 'failed', 'released', 'withdrawn', 'superseded')"`
	WaitReason *string    `json:"waitReason,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
	UpdatedAt  time.Time  `json:"updatedAt"`
	ReleasedAt *time.Time `json:"releasedAt,omitempty"`
	// CheckDue is when the Change's check may next be tried (the
	// verifiers' queue, change_queue.go); nil when nothing is to verify.
	// An insert without it is due at once.
	CheckDue *time.Time `json:"-" gorm:"default:now()"`

	// AuthorName and ProjectName are filled by the listing queries.
	AuthorName  string `json:"author" gorm:"->;-:migration"`
	ProjectName string `json:"project" gorm:"->;-:migration"`
}

// Validate mirrors the changes table's CHECKs.
func (c *Change) Validate() error {
	switch {
	case c.Message == "" || len([]rune(c.Message)) > 10000:
		return fmt.Errorf("%w: a change's message has 1 to 10000 characters", ErrInvalid)
	case len(c.Paths) == 0 || len(c.Paths) > 200:
		return fmt.Errorf("%w: a change touches 1 to 200 paths", ErrInvalid)
	case !isSHA(c.BaseCommit) || !isSHA(c.CommitSHA):
		return fmt.Errorf("%w: a change's base and commit are full hashes", ErrInvalid)
	case c.Status != ChangeComposed && c.Status != ChangeVerifying:
		return fmt.Errorf("%w: a change starts composed, not %q", ErrInvalid, c.Status)
	}
	return nil
}

// BeforeCreate runs Validate for every insert through GORM.
func (c *Change) BeforeCreate(*gorm.DB) error { return c.Validate() }

func isSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ChangeSet is one set of edits of a Change.
type ChangeSet struct {
	ID        int64           `json:"id"`
	ChangeID  int64           `json:"changeId"`
	Kind      string          `json:"kind"`
	AuthorID  *int64          `json:"authorId"`
	CommitSHA string          `json:"commit" gorm:"column:commit_sha"`
	Commands  json.RawMessage `json:"commands" gorm:"type:jsonb"`
	CreatedAt time.Time       `json:"createdAt"`
}

// Ran is the commands the set's session ran, oldest first, as its audit
// recorded them (never their output).
func (cs ChangeSet) Ran() ([]SessionCommand, error) {
	if len(cs.Commands) == 0 {
		return nil, nil
	}
	var ran []SessionCommand
	if err := json.Unmarshal(cs.Commands, &ran); err != nil {
		return nil, fmt.Errorf("models: commands of change set %d: %w", cs.ID, err)
	}
	return ran, nil
}

// Evidence is what a Change's commit was shown to do.
type Evidence struct {
	ID         int64     `json:"id"`
	ChangeID   int64     `json:"changeId"`
	CommitSHA  string    `json:"commit" gorm:"column:commit_sha"`
	Kind       string    `json:"kind"`
	Passed     bool      `json:"passed"`
	Command    *string   `json:"command,omitempty"`
	ExitCode   *int      `json:"exitCode,omitempty"`
	DurationMS *int64    `json:"durationMs,omitempty" gorm:"column:duration_ms"`
	OutputTail *string   `json:"outputTail,omitempty"`
	ApprovedBy *int64    `json:"approvedBy,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
}

// TableName maps Evidence to evidence.
func (Evidence) TableName() string { return "evidence" }

// BeforeCreate mirrors evidence_check_complete and evidence_approval_passes.
func (e *Evidence) BeforeCreate(*gorm.DB) error {
	switch e.Kind {
	case EvidenceCheck:
		if e.Command == nil || e.ExitCode == nil || e.DurationMS == nil || e.Passed != (*e.ExitCode == 0) {
			return fmt.Errorf("%w: a check's evidence has its command, exit code and duration, and passes on exit 0", ErrInvalid)
		}
	case EvidenceApproval:
		if !e.Passed || e.Command != nil {
			return fmt.Errorf("%w: an approval passes and runs no command", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: evidence kind %q", ErrInvalid, e.Kind)
	}
	return nil
}

// ErrChangeMoved is a status update that found the Change no longer in the
// status it expected: someone else moved it first.
var ErrChangeMoved = errors.New("models: the change moved meanwhile")

// CreateChange inserts a Change with its human ChangeSet. A second Change
// of the same session is ErrConflict (constraint changes_one_per_session).
func (s *Store) CreateChange(ctx context.Context, c *Change, set *ChangeSet) error {
	err := s.Tx(ctx, func(tx *Store) error {
		if err := tx.db.Create(c).Error; err != nil {
			return err
		}
		set.ChangeID = c.ID
		return tx.db.Create(set).Error
	})
	if err != nil {
		return fmt.Errorf("models: create change: %w", translate(err))
	}
	return nil
}

// ChangeByID returns the change, or ErrNotFound.
func (s *Store) ChangeByID(ctx context.Context, id int64) (*Change, error) {
	var c Change
	err := s.changes(ctx).Where("changes.id = ?", id).Take(&c).Error
	if err != nil {
		return nil, fmt.Errorf("models: change %d: %w", id, translate(err))
	}
	return &c, nil
}

// LockChange returns the change with its row locked for the rest of the
// transaction.
func (s *Store) LockChange(ctx context.Context, id int64) (*Change, error) {
	var c Change
	err := s.db.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).Take(&c).Error
	if err != nil {
		return nil, fmt.Errorf("models: lock change %d: %w", id, translate(err))
	}
	return &c, nil
}

// ChangeOfSession returns the Change a session yielded, or ErrNotFound.
func (s *Store) ChangeOfSession(ctx context.Context, sessionID string) (*Change, error) {
	var c Change
	err := s.changes(ctx).Where("changes.session_id = ?", sessionID).Take(&c).Error
	if err != nil {
		return nil, fmt.Errorf("models: change of session %s: %w", sessionID, translate(err))
	}
	return &c, nil
}

// changes selects changes with their author's name.
func (s *Store) changes(ctx context.Context) *gorm.DB {
	return s.db.WithContext(ctx).Table("changes").
		Select("changes.*, coalesce(users.username, '') AS author_name, projects.name AS project_name").
		Joins("LEFT JOIN users ON users.id = changes.author_id").
		Joins("JOIN projects ON projects.id = changes.project_id")
}

// ChangesOf lists a project's changes, newest first.
func (s *Store) ChangesOf(ctx context.Context, projectID int64, limit int) ([]Change, error) {
	var cs []Change
	err := s.changes(ctx).Where("changes.project_id = ?", projectID).Order("changes.id DESC").Limit(limit).Scan(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("models: changes of project %d: %w", projectID, err)
	}
	return cs, nil
}

// ChangesByStatus lists the changes in any of statuses across projects
// (projectID 0) or in one, oldest first: the verifier's restart list and
// the dashboard's "waiting".
func (s *Store) ChangesByStatus(ctx context.Context, projectID int64, statuses ...string) ([]Change, error) {
	var cs []Change
	q := s.changes(ctx).Where("changes.status IN ?", statuses)
	if projectID != 0 {
		q = q.Where("changes.project_id = ?", projectID)
	}
	if err := q.Order("changes.id").Scan(&cs).Error; err != nil {
		return nil, fmt.Errorf("models: changes by status: %w", err)
	}
	return cs, nil
}

// WaitingChanges lists the changes that wait for someone or something:
// composed, verifying or verified, not yet released.
func (s *Store) WaitingChanges(ctx context.Context, projectID int64) ([]Change, error) {
	return s.ChangesByStatus(ctx, projectID, ChangeComposed, ChangeVerifying, ChangeVerified)
}

// ChangeCounts counts the site's Changes by status, for monitoring; every
// status is there, so a graph shows zero rather than nothing.
func (s *Store) ChangeCounts(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Status string
		N      int64
	}
	if err := s.db.WithContext(ctx).Raw(`SELECT status, count(*) AS n FROM changes GROUP BY status`).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("models: change counts: %w", translate(err))
	}
	out := map[string]int64{}
	for _, status := range []string{ChangeComposed, ChangeVerifying, ChangeVerified, ChangeFailed,
		ChangeReleased, ChangeWithdrawn, ChangeSuperseded} {
		out[status] = 0
	}
	for _, r := range rows {
		out[r.Status] = r.N
	}
	return out, nil
}

// ChangeUpdate is a move of a Change, made only when it is still in From.
type ChangeUpdate struct {
	From       []string
	To         string
	WaitReason *string // set as given (nil clears it)
	// Base and Commit, when set, replace the Change's (a re-compose).
	Base, Commit string
	ReleasedAt   *time.Time
	// Check, when set, queues the Change's check afresh, due then.
	Check *time.Time
	At    time.Time
}

// MoveChange applies u when the change is in one of u.From, else
// ErrChangeMoved. A move the pipeline does not allow is ErrInvalid.
func (s *Store) MoveChange(ctx context.Context, id int64, u ChangeUpdate) error {
	for _, from := range u.From {
		if !CanMove(from, u.To) {
			return fmt.Errorf("models: change %d: %w: no move from %s to %s", id, ErrInvalid, from, u.To)
		}
	}
	cols := map[string]any{"status": u.To, "wait_reason": u.WaitReason, "updated_at": u.At}
	if u.Base != "" {
		cols["base_commit"] = u.Base
	}
	if u.Commit != "" {
		cols["commit_sha"] = u.Commit
	}
	if u.ReleasedAt != nil {
		cols["released_at"] = *u.ReleasedAt
	}
	// A Change on no way to verified leaves the verifiers' queue, and a
	// claim on its check goes with it: the check's end finds it gone
	// (changes_queued_unfinished).
	if u.To != ChangeComposed && u.To != ChangeVerifying {
		cols["check_due"], cols["claimed_by"], cols["claimed_until"] = nil, nil, nil
	} else if u.Check != nil {
		cols["check_due"], cols["check_attempts"], cols["claimed_by"], cols["claimed_until"] = *u.Check, 0, nil, nil
	}
	res := s.db.WithContext(ctx).Table("changes").Where("id = ? AND status IN ?", id, u.From).UpdateColumns(cols)
	if res.Error != nil {
		return fmt.Errorf("models: move change %d to %s: %w", id, u.To, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("models: move change %d to %s: %w", id, u.To, ErrChangeMoved)
	}
	return nil
}

// AddEvidence records evidence.
func (s *Store) AddEvidence(ctx context.Context, e *Evidence) error {
	if err := s.db.WithContext(ctx).Create(e).Error; err != nil {
		return fmt.Errorf("models: evidence of change %d: %w", e.ChangeID, translate(err))
	}
	return nil
}

// EvidenceOf returns a change's evidence, oldest first.
func (s *Store) EvidenceOf(ctx context.Context, changeID int64) ([]Evidence, error) {
	var es []Evidence
	if err := s.db.WithContext(ctx).Where("change_id = ?", changeID).Order("id").Find(&es).Error; err != nil {
		return nil, fmt.Errorf("models: evidence of change %d: %w", changeID, err)
	}
	return es, nil
}

// ChangeSetsOf returns a change's sets.
func (s *Store) ChangeSetsOf(ctx context.Context, changeID int64) ([]ChangeSet, error) {
	var cs []ChangeSet
	if err := s.db.WithContext(ctx).Where("change_id = ?", changeID).Order("id").Find(&cs).Error; err != nil {
		return nil, fmt.Errorf("models: sets of change %d: %w", changeID, err)
	}
	return cs, nil
}

// ChangeEvents returns the events of one change, oldest first: its
// timeline.
func (s *Store) ChangeEvents(ctx context.Context, projectID, changeID int64) ([]NamedEvent, error) {
	var es []NamedEvent
	err := s.db.WithContext(ctx).Raw(namedEvents+`
		WHERE e.project_id = ? AND e.type LIKE 'change.%' AND e.data->>'changeId' = ?
		ORDER BY e.id`, projectID, fmt.Sprint(changeID)).Scan(&es).Error
	if err != nil {
		return nil, fmt.Errorf("models: events of change %d: %w", changeID, err)
	}
	return es, nil
}

// SetCheckCommand records the project's check command (nil: none).
func (s *Store) SetCheckCommand(ctx context.Context, projectID int64, command *string) error {
	err := s.db.WithContext(ctx).Model(&Project{}).Where("id = ?", projectID).UpdateColumn("check_command", command).Error
	if err != nil {
		return fmt.Errorf("models: check command of project %d: %w", projectID, translate(err))
	}
	return nil
}

// VerifyingChanges answers which of ids name Changes being verified.
func (s *Store) VerifyingChanges(ctx context.Context, ids []int64) (map[int64]bool, error) {
	verifying := make(map[int64]bool, len(ids))
	if len(ids) == 0 {
		return verifying, nil
	}
	var found []int64
	err := s.db.WithContext(ctx).Model(&Change{}).Where("id IN ? AND status = ?", ids, ChangeVerifying).Pluck("id", &found).Error
	if err != nil {
		return nil, fmt.Errorf("models: Changes being verified among %d: %w", len(ids), err)
	}
	for _, id := range found {
		verifying[id] = true
	}
	return verifying, nil
}
