package projects

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"atelier/auth"
	"atelier/models"
)

// RoleRecheck is how long a membership read from the database is believed
// without asking again. A change made through this instance (a member
// removed, a role changed, the project archived or deleted) takes effect
// at once, and on the other instances as soon as they hear of it
// (TellPeers); a change whose news was lost, within this.
const RoleRecheck = 2 * time.Second

// rolesMax bounds the remembered memberships; past it they are all
// forgotten, which costs one query each on their next request.
const rolesMax = 100_000

// roles remembers the memberships read recently: a person's role in a
// project and whether the project is archived, nothing else of its row,
// whose canonical commit and settings imports and releases change. That is
// all a terminal's keystrokes and stream need, so they cost a map lookup
// rather than a query.
type roles struct {
	mu sync.Mutex
	// gen grows with every forget, so a lookup that read the database
	// before a change cannot put what it read back after the change.
	gen     uint64
	entries map[memberKey]roleEntry
}

type memberKey struct{ project, user int64 }

type roleEntry struct {
	role     auth.Role
	archived bool
	checked  time.Time
}

func (r *roles) get(k memberKey, now time.Time) (roleEntry, bool) {
	r.mu.Lock()
	e, ok := r.entries[k]
	r.mu.Unlock()
	if !ok || now.Sub(e.checked) >= RoleRecheck || now.Before(e.checked) {
		return roleEntry{}, false
	}
	return e, true
}

// generation is the forget count a lookup starts from; put takes it back.
func (r *roles) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

func (r *roles) put(k memberKey, e roleEntry, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen {
		return
	}
	if r.entries == nil || len(r.entries) >= rolesMax {
		r.entries = make(map[memberKey]roleEntry)
	}
	r.entries[k] = e
}

// forget drops one person's membership of a project.
func (r *roles) forget(k memberKey) {
	r.mu.Lock()
	r.gen++
	delete(r.entries, k)
	r.mu.Unlock()
}

// forgetProject drops every membership of a project.
func (r *roles) forgetProject(projectID int64) {
	r.mu.Lock()
	r.gen++
	for k := range r.entries {
		if k.project == projectID {
			delete(r.entries, k)
		}
	}
	r.mu.Unlock()
}

// What one instance tells the others it forgot: one person's membership
// of a project, or every membership of a project.
const (
	forgetMember  = "member %d %d" // project, user
	forgetProject = "project %d"
)

// TellPeers makes every membership this Service forgets known to tell: the
// server hands each to the other instances, whose Forget stops believing
// it at once. Called before the Service serves.
func (s *Service) TellPeers(tell func(ctx context.Context, forgotten string)) { s.tell = tell }

func (s *Service) forgetMember(ctx context.Context, k memberKey) {
	s.roles.forget(k)
	if s.tell != nil {
		s.tell(ctx, fmt.Sprintf(forgetMember, k.project, k.user))
	}
}

func (s *Service) forgetProject(ctx context.Context, projectID int64) {
	s.roles.forgetProject(projectID)
	if s.tell != nil {
		s.tell(ctx, fmt.Sprintf(forgetProject, projectID))
	}
}

// Forget acts on what another instance told through TellPeers; anything
// else is ignored (the next check of RoleRecheck still comes).
func (s *Service) Forget(forgotten string) {
	var k memberKey
	if n, _ := fmt.Sscanf(forgotten, forgetMember, &k.project, &k.user); n == 2 {
		s.roles.forget(k)
	} else if n, _ := fmt.Sscanf(forgotten, forgetProject, &k.project); n == 1 {
		s.roles.forgetProject(k.project)
	}
}

// ForgetAll forgets every membership, for when news of some may have been
// lost: each costs one query on its next use.
func (s *Service) ForgetAll() {
	s.roles.mu.Lock()
	s.roles.gen++
	s.roles.entries = nil
	s.roles.mu.Unlock()
}

// Permit is Authorize's verdict on action without the project's row: nil,
// ErrNotFound, auth.ErrForbidden or ErrArchived. It answers from memory
// when the membership was read less than RoleRecheck ago, and is meant for
// requests that need nothing of the project but the right, such as every
// keystroke of a terminal.
func (s *Service) Permit(ctx context.Context, user *models.User, projectID int64, action auth.Action) error {
	if user == nil {
		return auth.ErrSignInRequired
	}
	k := memberKey{project: projectID, user: user.ID}
	e, ok := s.roles.get(k, s.now())
	if !ok {
		gen := s.roles.generation()
		p, role, err := s.store.ProjectOfMember(ctx, projectID, user.ID)
		if errors.Is(err, models.ErrNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		e = s.remember(k, p, role, gen)
	}
	return verdict(e.role, e.archived, action)
}

// remember keeps what a lookup that began at gen read.
func (s *Service) remember(k memberKey, p *models.Project, role string, gen uint64) roleEntry {
	e := roleEntry{role: auth.Role(role), archived: p.Archived(), checked: s.now()}
	s.roles.put(k, e, gen)
	return e
}

// verdict is the one rule Authorize and Permit share.
func verdict(role auth.Role, archived bool, action auth.Action) error {
	if !auth.Can(role, action) {
		return auth.ErrForbidden
	}
	if action == auth.CodeEdit && archived {
		return ErrArchived
	}
	return nil
}
