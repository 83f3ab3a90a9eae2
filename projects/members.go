package projects

import (
	"context"
	"errors"
	"strings"

	"atelier/auth"
	"atelier/fault"
	"atelier/models"
)

// ErrNoInvitation is an answer to an invitation that is not (or no longer)
// there: never made, already answered, or withdrawn.
var ErrNoInvitation = fault.New(fault.NotFound, "no_invitation", "projects: no such invitation", "There is no such invitation; it may have been withdrawn.")

// MemberChange says what SetMember did.
type MemberChange int

const (
	// RoleGiven: the person holds the role now (or held it already).
	RoleGiven MemberChange = iota
	// OwnerInvited: ownership was offered; the person holds it once they
	// accept on their projects page, and nothing changes until then.
	OwnerInvited
)

// Members lists the project's members.
func (s *Service) Members(ctx context.Context, acc *Access) ([]models.ProjectMember, error) {
	return s.store.Members(ctx, acc.Project.ID)
}

// InvitationsOf lists the project's pending offers of ownership.
func (s *Service) InvitationsOf(ctx context.Context, acc *Access) ([]models.InvitedOwner, error) {
	return s.store.InvitationsOf(ctx, acc.Project.ID)
}

// SetMember adds username with role or changes their role. A member or an
// admin is added at once; ownership is only offered (OwnerInvited): it
// carries rights over the project and its members and cannot be put down
// while one is the last owner, so nobody holds it without consent.
func (s *Service) SetMember(ctx context.Context, acc *Access, username string, role auth.Role) (MemberChange, error) {
	if !auth.ValidRole(role) {
		return RoleGiven, ErrBadRole
	}
	return s.changeMember(ctx, acc, username, role)
}

// RemoveMember takes username out of the project.
func (s *Service) RemoveMember(ctx context.Context, acc *Access, username string) error {
	_, err := s.changeMember(ctx, acc, username, "")
	return err
}

// changeMember gives username the role, offers ownership, or removes them
// when role is "". Granting, offering or taking the owner role needs an
// owner, and the last owner stays (Leave passes the project on instead);
// the owners are locked so two changes cannot both remove "the other"
// owner. An owner who stops being one withdraws the offers they made, and
// a person who may no longer edit has their open session ended.
func (s *Service) changeMember(ctx context.Context, acc *Access, username string, role auth.Role) (MemberChange, error) {
	u, err := s.store.UserByName(ctx, strings.TrimSpace(username))
	if errors.Is(err, models.ErrNotFound) {
		return RoleGiven, ErrUnknownUser
	}
	if err != nil {
		return RoleGiven, err
	}
	// Forgotten once the change is committed, so a request racing it cannot
	// keep the old role.
	defer s.forgetMember(ctx, memberKey{project: acc.Project.ID, user: u.ID})
	out := RoleGiven
	var revoked bool
	err = s.store.Tx(ctx, func(tx *models.Store) error {
		owners, err := tx.LockOwners(ctx, acc.Project.ID)
		if err != nil {
			return err
		}
		current, err := tx.MemberRole(ctx, acc.Project.ID, u.ID)
		switch {
		case errors.Is(err, models.ErrNotFound) && role == "":
			return ErrUnknownUser
		case err != nil && !errors.Is(err, models.ErrNotFound):
			return err
		}
		wasOwner := current == models.RoleOwner
		if (wasOwner || role == auth.RoleOwner) && !acc.Can(auth.ProjectOwn) {
			return auth.ErrForbidden
		}
		if role == auth.RoleOwner {
			if wasOwner {
				return nil
			}
			out = OwnerInvited
			return tx.InviteOwner(ctx, &models.OwnerInvitation{ProjectID: acc.Project.ID, UserID: u.ID, InvitedBy: acc.User.ID, CreatedAt: s.now()})
		}
		if wasOwner && owners <= 1 {
			return ErrLastOwner
		}
		if wasOwner {
			if err := tx.DropInvitationsBy(ctx, acc.Project.ID, u.ID); err != nil {
				return err
			}
		}
		revoked = auth.Can(auth.Role(current), auth.CodeEdit) && !auth.Can(role, auth.CodeEdit)
		if role == "" {
			return tx.RemoveMember(ctx, acc.Project.ID, u.ID)
		}
		return tx.SetMember(ctx, &models.Member{ProjectID: acc.Project.ID, UserID: u.ID, Role: string(role)})
	})
	if err != nil {
		return RoleGiven, err
	}
	if revoked {
		s.endSessions(ctx, acc.Project.ID, u)
	}
	if out == OwnerInvited {
		s.log.Info("ownership offered", "project", acc.Project.ID, "to", u.Username, "by", acc.User.Username)
	}
	return out, nil
}

// endSessions ends u's open session on the project once they may no
// longer edit it. A failure leaves the session to its limits (and to the
// next unarchive when the project is archived); it is only logged, since
// the change of membership stands.
func (s *Service) endSessions(ctx context.Context, projectID int64, u *models.User) {
	if err := s.sessions.EndMemberSessions(ctx, projectID, u.ID); err != nil {
		s.log.Warn("the session of someone who may no longer edit was not ended", "project", projectID, "user", u.Username, "err", err)
	}
}

// WithdrawInvitation takes back the offer of ownership to username; any
// owner may.
func (s *Service) WithdrawInvitation(ctx context.Context, acc *Access, username string) error {
	if !acc.Can(auth.ProjectOwn) {
		return auth.ErrForbidden
	}
	u, err := s.store.UserByName(ctx, strings.TrimSpace(username))
	if errors.Is(err, models.ErrNotFound) {
		return ErrNoInvitation
	}
	if err != nil {
		return err
	}
	_, err = s.store.TakeInvitation(ctx, acc.Project.ID, u.ID)
	if errors.Is(err, models.ErrNotFound) {
		return ErrNoInvitation
	}
	return err
}

// Invitations lists the offers of ownership made to user, for their
// projects page.
func (s *Service) Invitations(ctx context.Context, user *models.User) ([]models.PendingInvitation, error) {
	return s.store.InvitationsFor(ctx, user.ID)
}

// AcceptInvitation makes user an owner of the project that offered it.
// Accepting takes no place in the bound on projects a person creates. The
// offer counts only while its author is still an owner; the owners are
// locked, as for every change of ownership, so it cannot lapse meanwhile.
func (s *Service) AcceptInvitation(ctx context.Context, user *models.User, projectID int64) error {
	if user == nil {
		return auth.ErrSignInRequired
	}
	defer s.forgetMember(ctx, memberKey{project: projectID, user: user.ID})
	err := s.store.Tx(ctx, func(tx *models.Store) error {
		if _, err := tx.LockOwners(ctx, projectID); err != nil {
			return err
		}
		inv, err := tx.TakeInvitation(ctx, projectID, user.ID)
		if errors.Is(err, models.ErrNotFound) {
			return ErrNoInvitation
		}
		if err != nil {
			return err
		}
		role, err := tx.MemberRole(ctx, projectID, inv.InvitedBy)
		if err != nil && !errors.Is(err, models.ErrNotFound) {
			return err
		}
		if role != models.RoleOwner {
			return ErrNoInvitation
		}
		return tx.SetMember(ctx, &models.Member{ProjectID: projectID, UserID: user.ID, Role: models.RoleOwner})
	})
	if err != nil {
		return err
	}
	s.log.Info("ownership accepted", "project", projectID, "by", user.Username)
	return nil
}

// DeclineInvitation turns the offer down; user's membership, if any, stays
// as it was.
func (s *Service) DeclineInvitation(ctx context.Context, user *models.User, projectID int64) error {
	if user == nil {
		return auth.ErrSignInRequired
	}
	_, err := s.store.TakeInvitation(ctx, projectID, user.ID)
	if errors.Is(err, models.ErrNotFound) {
		return ErrNoInvitation
	}
	if err != nil {
		return err
	}
	s.log.Info("ownership declined", "project", projectID, "by", user.Username)
	return nil
}

// Departure is what became of a project its last owner left.
type Departure struct {
	Heir     string // the admin who became its owner, or ""
	Archived bool   // no admin was left to take it: it is archived
}

// Leave takes user out of the project, whatever their role, the project
// archived or not. When they were its last owner, the admin who joined
// first becomes the owner; with no admin, the project is archived (its
// members keep reading it, and a site admin can unarchive it). Their offers
// of ownership are withdrawn and their open session there ends.
func (s *Service) Leave(ctx context.Context, user *models.User, projectID int64) (Departure, error) {
	var d Departure
	acc, err := s.Authorize(ctx, user, projectID, auth.CodeRead)
	if err != nil {
		return d, err
	}
	defer s.forgetProject(ctx, projectID)
	var role string
	err = s.store.Tx(ctx, func(tx *models.Store) error {
		owners, err := tx.LockOwners(ctx, projectID)
		if err != nil {
			return err
		}
		if role, err = tx.MemberRole(ctx, projectID, user.ID); errors.Is(err, models.ErrNotFound) {
			return ErrNotFound // left meanwhile
		} else if err != nil {
			return err
		}
		if err := tx.RemoveMember(ctx, projectID, user.ID); err != nil {
			return err
		}
		if role != models.RoleOwner {
			return nil
		}
		if err := tx.DropInvitationsBy(ctx, projectID, user.ID); err != nil {
			return err
		}
		if owners > 1 {
			return nil
		}
		heir, err := tx.EarliestAdminLocked(ctx, projectID)
		if errors.Is(err, models.ErrNotFound) {
			d.Archived = true
			return tx.ArchiveProject(ctx, projectID, s.now())
		}
		if err != nil {
			return err
		}
		if err := tx.SetMember(ctx, &models.Member{ProjectID: projectID, UserID: heir, Role: models.RoleOwner}); err != nil {
			return err
		}
		// An offer to the heir has nothing left to offer.
		if _, err := tx.TakeInvitation(ctx, projectID, heir); err != nil && !errors.Is(err, models.ErrNotFound) {
			return err
		}
		u, err := tx.UserByID(ctx, heir)
		if err != nil {
			return err
		}
		d.Heir = u.Username
		return nil
	})
	if err != nil {
		return Departure{}, err
	}
	if auth.Can(auth.Role(role), auth.CodeEdit) {
		s.endSessions(ctx, projectID, user)
	}
	s.log.Info("member left", "project", projectID, "user", user.Username, "role", role,
		"heir", d.Heir, "archived", d.Archived, "name", acc.Project.Name)
	return d, nil
}

// ErrNotAMember: a person named for something only the project's members
// may have is not one of them (or does not exist: the answer is the same).
var ErrNotAMember = fault.New(fault.BadInput, "not_a_member", "projects: not a member of the project",
	"Only members of this project can be chosen; add them on the Members page first.")

// Member returns the member of the project named username, who may read
// its code.
func (s *Service) Member(ctx context.Context, projectID int64, username string) (*models.User, error) {
	user, err := s.store.UserByName(ctx, strings.TrimSpace(username))
	if errors.Is(err, models.ErrNotFound) {
		return nil, ErrNotAMember
	}
	if err != nil {
		return nil, err
	}
	if err := s.Permit(ctx, user, projectID, auth.CodeRead); err != nil {
		if errors.Is(err, auth.ErrForbidden) || errors.Is(err, ErrNotFound) {
			return nil, ErrNotAMember
		}
		return nil, err
	}
	return user, nil
}
