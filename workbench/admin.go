package workbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"atelier/editsession"
	"atelier/events"
	"atelier/models"
	"atelier/terminal"
)

// What site admins see of commands and shells, and what they may do to
// them. Every action re-checks that its actor is a site admin: the route's
// check is not the only one.

// RunningCommand is a command running on this instance now.
type RunningCommand struct {
	SessionID string    `json:"sessionId"`
	ProjectID int64     `json:"projectId"`
	Project   string    `json:"project"`
	UserID    int64     `json:"userId"`
	Command   string    `json:"command"`
	Folder    string    `json:"folder"`
	StartedAt time.Time `json:"startedAt"`
	// cancel ends the command's context (CancelCommands).
	cancel context.CancelCauseFunc
}

// runningCommands are the commands this instance runs, for site admins,
// and the output of each session's, for its page (live.go).
type runningCommands struct {
	mu   sync.Mutex
	all  map[*RunningCommand]struct{}
	live map[string]*terminal.Output // by session
}

func (rc *runningCommands) add(c *RunningCommand) (remove func()) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.all == nil {
		rc.all = map[*RunningCommand]struct{}{}
	}
	rc.all[c] = struct{}{}
	return func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		delete(rc.all, c)
	}
}

// RunningCommands lists the commands running on this instance, oldest
// first.
func (r *Runtime) RunningCommands() []RunningCommand {
	r.commands.mu.Lock()
	out := make([]RunningCommand, 0, len(r.commands.all))
	for c := range r.commands.all {
		out = append(out, *c)
	}
	r.commands.mu.Unlock()
	slices.SortFunc(out, func(a, b RunningCommand) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// hint tells open dashboards that topic changed.
func (r *Runtime) hint(topic string) {
	if r.sb.Hint != nil {
		r.sb.Hint(topic)
	}
}

// OpenShell is a live shell as site admins see it. BytesOut and Viewers
// are known for shells of this instance only (Here).
type OpenShell struct {
	ID        string        `json:"id"`
	SessionID string        `json:"sessionId"`
	ProjectID int64         `json:"projectId"`
	Project   string        `json:"project"`
	UserID    int64         `json:"userId"`
	Username  string        `json:"username"`
	Instance  string        `json:"instance"`
	Here      bool          `json:"here"`
	OpenedAt  time.Time     `json:"openedAt"`
	BytesOut  uint64        `json:"bytesOut"`
	Viewers   int           `json:"viewers"`
	LeaseAge  time.Duration `json:"-"`
}

// SlotUse is how many shell slots each account and the instance hold, and
// their bounds.
type SlotUse struct {
	Accounts      []AccountSlots `json:"accounts"`
	Instance      int            `json:"instance"`
	InstanceMax   int            `json:"instanceMax"`
	PerAccountMax int            `json:"perAccountMax"`
}

// AccountSlots is one account's shell slots on this instance.
type AccountSlots struct {
	UserID int64 `json:"userId"`
	Shells int   `json:"shells"`
}

// OpenShells lists the live shells of every instance, oldest first, and
// this instance's slot use.
func (s *Shells) OpenShells(ctx context.Context) ([]OpenShell, SlotUse, error) {
	rows, err := s.db.LiveTerminals(ctx)
	if err != nil {
		return nil, SlotUse{}, err
	}
	now := s.now()
	out := make([]OpenShell, len(rows))
	for i, r := range rows {
		out[i] = OpenShell{ID: r.ID, SessionID: r.SessionID, ProjectID: r.ProjectID, Project: r.Project,
			UserID: r.UserID, Username: r.Username, Instance: r.Instance, OpenedAt: r.OpenedAt,
			LeaseAge: max(now.Sub(r.HeartbeatAt), 0)}
		if r.Instance != s.instance {
			continue
		}
		if t, err := s.terms.Get(r.ID); err == nil {
			out[i].Here = true
			out[i].BytesOut = t.Offset()
			out[i].Viewers = t.Viewers()
		}
	}
	byAccount, instance := s.terms.Slots()
	cfg := s.terms.Config()
	use := SlotUse{Instance: instance, InstanceMax: cfg.InstanceShells, PerAccountMax: cfg.AccountShells}
	for account, n := range byAccount {
		id, err := strconv.ParseInt(account, 10, 64)
		if err != nil {
			continue // not a person's slot
		}
		use.Accounts = append(use.Accounts, AccountSlots{UserID: id, Shells: n})
	}
	slices.SortFunc(use.Accounts, func(a, b AccountSlots) int { return b.Shells - a.Shells })
	return out, use, nil
}

// CloseByAdmin closes shell id for a site admin. A shell of this instance
// closes now, and its end settles its time as any end does; the lease of a
// shell on another instance is ended, and that instance's heartbeat closes
// the shell within a few seconds. terminal.ErrNotFound when no live shell
// has that id.
func (s *Shells) CloseByAdmin(ctx context.Context, admin *models.User, id string) error {
	if admin == nil || !admin.IsAdmin {
		return editsession.ErrNotSiteAdmin
	}
	lease, err := s.db.TerminalByID(ctx, id)
	if errors.Is(err, models.ErrNotFound) || err == nil && lease.State != models.TerminalLive {
		return terminal.ErrNotFound
	}
	if err != nil {
		return err
	}
	if t, err := s.terms.Get(id); err == nil {
		if err := t.Close(); err != nil {
			return fmt.Errorf("workbench: close shell %s: %w", id, err)
		}
	}
	// The shell's watch ends the lease too, a moment later; ending it here
	// means the answer already lists the shell as gone.
	if err := s.db.EndTerminal(ctx, id, models.TerminalClosed, s.now()); err != nil {
		return err
	}
	s.tell(events.TopicTerminals)
	return nil
}
