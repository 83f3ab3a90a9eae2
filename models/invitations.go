package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// OwnerInvitation is an owner's offer of the owner role to someone, who
// becomes an owner only by accepting it.
type OwnerInvitation struct {
	ProjectID int64     `json:"projectId" gorm:"primaryKey;autoIncrement:false"`
	UserID    int64     `json:"userId" gorm:"primaryKey;autoIncrement:false"`
	InvitedBy int64     `json:"invitedBy" gorm:"check:owner_invitations_not_self,user_id <> invited_by"`
	CreatedAt time.Time `json:"createdAt"`
}

// BeforeSave mirrors owner_invitations_not_self.
func (i *OwnerInvitation) BeforeSave(*gorm.DB) error {
	if i.UserID == i.InvitedBy {
		return fmt.Errorf("%w: nobody invites themself", ErrInvalid)
	}
	return nil
}

// InviteOwner records the offer; one already pending stays as it was (its
// author and time), so inviting twice is not an error.
func (s *Store) InviteOwner(ctx context.Context, inv *OwnerInvitation) error {
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(inv).Error
	if err != nil {
		return fmt.Errorf("models: invite user %d to own project %d: %w", inv.UserID, inv.ProjectID, translate(err))
	}
	return nil
}

// TakeInvitation deletes the offer to userID on projectID and returns it,
// or ErrNotFound when there is none; in a transaction, the offer is the
// caller's alone until it ends.
func (s *Store) TakeInvitation(ctx context.Context, projectID, userID int64) (*OwnerInvitation, error) {
	var invs []OwnerInvitation
	err := s.db.WithContext(ctx).Clauses(clause.Returning{}).
		Where("project_id = ? AND user_id = ?", projectID, userID).Delete(&invs).Error
	if err != nil {
		return nil, fmt.Errorf("models: invitation of user %d to project %d: %w", userID, projectID, translate(err))
	}
	if len(invs) == 0 {
		return nil, fmt.Errorf("models: invitation of user %d to project %d: %w", userID, projectID, ErrNotFound)
	}
	return &invs[0], nil
}

// DropInvitationsBy withdraws every offer inviterID made on the project:
// an offer stands only while its author is an owner.
func (s *Store) DropInvitationsBy(ctx context.Context, projectID, inviterID int64) error {
	err := s.db.WithContext(ctx).Where("project_id = ? AND invited_by = ?", projectID, inviterID).
		Delete(&OwnerInvitation{}).Error
	if err != nil {
		return fmt.Errorf("models: invitations by user %d on project %d: %w", inviterID, projectID, err)
	}
	return nil
}

// PendingInvitation is an offer as its invitee reads it.
type PendingInvitation struct {
	ProjectID   int64     `json:"projectId"`
	ProjectName string    `json:"projectName"`
	InvitedBy   string    `json:"invitedBy"` // the inviting owner's username
	CreatedAt   time.Time `json:"createdAt"`
}

// InvitationsFor lists the offers made to userID, newest first.
func (s *Store) InvitationsFor(ctx context.Context, userID int64) ([]PendingInvitation, error) {
	var invs []PendingInvitation
	err := s.db.WithContext(ctx).Table("owner_invitations AS i").
		Select("i.project_id, p.name AS project_name, u.username AS invited_by, i.created_at").
		Joins("JOIN projects AS p ON p.id = i.project_id").
		Joins("JOIN users AS u ON u.id = i.invited_by").
		Where("i.user_id = ?", userID).
		Order("i.created_at DESC, i.project_id").Scan(&invs).Error
	if err != nil {
		return nil, fmt.Errorf("models: invitations for user %d: %w", userID, err)
	}
	return invs, nil
}

// InvitedOwner is a pending offer as the project's members see it.
type InvitedOwner struct {
	Username  string    `json:"username"`
	InvitedBy string    `json:"invitedBy"`
	CreatedAt time.Time `json:"createdAt"`
}

// InvitationsOf lists the project's pending offers, by invitee.
func (s *Store) InvitationsOf(ctx context.Context, projectID int64) ([]InvitedOwner, error) {
	var invs []InvitedOwner
	err := s.db.WithContext(ctx).Table("owner_invitations AS i").
		Select("u.username, b.username AS invited_by, i.created_at").
		Joins("JOIN users AS u ON u.id = i.user_id").
		Joins("JOIN users AS b ON b.id = i.invited_by").
		Where("i.project_id = ?", projectID).
		Order("u.username").Scan(&invs).Error
	if err != nil {
		return nil, fmt.Errorf("models: invitations of project %d: %w", projectID, err)
	}
	return invs, nil
}
