package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"atelier/events"
	"atelier/fault"
	"atelier/models"
)

var (
	// ErrDisabled is an account a site admin disabled: it signs in
	// nowhere, and nothing is done for it until it is enabled again.
	ErrDisabled = fault.New(fault.Forbidden, "account_disabled", "auth: the account is disabled",
		"This account is disabled; a site admin can enable it again.")
	// ErrWrongPassword is a change of one's own password whose current
	// password is wrong; it counts as a failed sign-in.
	ErrWrongPassword = fault.New(fault.Forbidden, "wrong_password", "auth: the current password is wrong",
		"The current password is wrong.")
	// ErrPasswordsDiffer is a new password typed twice differently.
	ErrPasswordsDiffer = fault.New(fault.BadInput, "passwords_differ", "auth: the new password and its repetition differ",
		"The new password and its repetition differ.")
	ErrNoSuchUser = fault.New(fault.NotFound, "no_such_user", "auth: no user with that name", "No user with that name.")
	// ErrLastSiteAdmin refuses to leave Atelier without a site admin who
	// can sign in.
	ErrLastSiteAdmin = fault.New(fault.Conflict, "last_site_admin", "auth: the last site admin who can sign in stays one",
		"Atelier keeps at least one site admin who can sign in: make someone else a site admin first.")
	// ErrOwnAccount is a site admin disabling their own account, which
	// would sign them out for good.
	ErrOwnAccount = fault.New(fault.Conflict, "own_account", "auth: a site admin does not disable their own account",
		"You cannot disable your own account.")
	// ErrResetLinkInvalid is a reset link that was used, has expired, was
	// replaced by a newer one, never existed, or whose account is disabled:
	// the answers are the same, so a link tells nothing of its account.
	ErrResetLinkInvalid = fault.New(fault.Gone, "reset_link_invalid", "auth: unknown, used or expired reset link",
		"This link no longer works: it was used, has expired or was replaced by a newer one. Ask a site admin for a new one.")
)

// ResetLinkTTL is how long a reset link works. It is made for one person
// and handed to them at once; a link that lies around longer is a password
// anyone who sees it can set.
const ResetLinkTTL = time.Hour

// Recorder keeps what happens in the event log (events.Recorder).
type Recorder interface {
	Record(ctx context.Context, e events.Event) error
}

// SessionEnder ends a disabled person's edit sessions, and with them their
// shells and commands (editsession.Sessions); by is the site admin.
type SessionEnder interface {
	EndPersonSessions(ctx context.Context, userID, by int64) error
}

// People changes accounts: a person's own password, and what site admins
// do to anyone's (a reset link, disabling, the site admin role). Each
// change is an event of the site's log. Whatever ends a person's
// sign-ins ends them in the database and in this instance's memory at
// once; other instances believe a sign-in for at most SignInRecheck.
type People struct {
	auth     *Service
	store    *models.Store
	events   Recorder
	sessions SessionEnder
	log      *slog.Logger
}

// NewPeople returns People over s. sessions may be nil where nobody is
// disabled (the command line).
func NewPeople(s *Service, rec Recorder, sessions SessionEnder, log *slog.Logger) *People {
	return &People{auth: s, store: s.store, events: rec, sessions: sessions, log: log}
}

// ChangePassword sets the person's new password once their current one is
// checked, then ends every other sign-in of theirs; keep is the token hash
// of the sign-in making the change (CurrentSignIn), which stays. A wrong
// current password counts against the person and the address like a
// failed sign-in, and is held back by the same waits. addr is the client's
// address.
func (p *People) ChangePassword(ctx context.Context, u *models.User, keep []byte, current, next, addr string) error {
	if err := checkNewPassword(next); err != nil {
		return err
	}
	s := p.auth
	try, err := s.admit(ctx, u.Username, clientKey(addr), s.now())
	if err != nil {
		return err
	}
	_, err = s.checkPassword(ctx, try.address, u.Username, current)
	if serr := s.settle(ctx, try, s.now(), errors.Is(err, ErrBadCredentials), err == nil); serr != nil {
		return serr
	}
	if errors.Is(err, ErrBadCredentials) {
		return ErrWrongPassword
	}
	if err != nil {
		return err
	}
	if err := p.setPassword(ctx, try.address, u.ID, next, keep); err != nil {
		return err
	}
	p.record(ctx, events.UserPasswordChanged, u.ID, u.Username, nil)
	return nil
}

// ResetLink is a link made for a person to set a new password once.
type ResetLink struct {
	User      *models.User
	Token     string // goes into the link; only its hash is stored
	ExpiresAt time.Time
}

// MakeResetLink makes the one link with which the named person sets a new
// password, replacing any link they had, for a site admin. Their password
// stays as it is until the link is used.
func (p *People) MakeResetLink(ctx context.Context, actor *models.User, username string) (*ResetLink, error) {
	if err := siteAdmin(actor); err != nil {
		return nil, err
	}
	u, err := p.user(ctx, username)
	if err != nil {
		return nil, err
	}
	if u.Disabled() {
		return nil, ErrDisabled
	}
	token, now := randomToken(), p.auth.now()
	r := &models.PasswordReset{TokenHash: hashToken(token), UserID: u.ID, CreatedBy: &actor.ID,
		CreatedAt: now, ExpiresAt: now.Add(ResetLinkTTL)}
	if err := p.store.PutPasswordReset(ctx, r); err != nil {
		return nil, err
	}
	p.record(ctx, events.UserResetLinkMade, actor.ID, u.Username, nil)
	return &ResetLink{User: u, Token: token, ExpiresAt: r.ExpiresAt}, nil
}

// ResetLinkUser returns the person a reset link is for, while it works;
// it does not use it.
func (p *People) ResetLinkUser(ctx context.Context, token string) (*models.User, error) {
	u, err := p.store.PasswordResetUser(ctx, hashToken(token), p.auth.now())
	if errors.Is(err, models.ErrNotFound) || token == "" {
		return nil, ErrResetLinkInvalid
	}
	return u, err
}

// UseResetLink sets the new password of the link's person and uses the
// link up; every sign-in of theirs ends. Of two requests with one link,
// one sets the password and the other gets ErrResetLinkInvalid.
func (p *People) UseResetLink(ctx context.Context, token, next, addr string) (*models.User, error) {
	if err := checkNewPassword(next); err != nil {
		return nil, err
	}
	// Looked at first, so a made-up link costs no hash.
	u, err := p.ResetLinkUser(ctx, token)
	if err != nil {
		return nil, err
	}
	hash, err := p.hash(ctx, clientKey(addr), next)
	if err != nil {
		return nil, err
	}
	err = p.store.Tx(ctx, func(tx *models.Store) error {
		id, err := tx.TakePasswordReset(ctx, hashToken(token), p.auth.now())
		if errors.Is(err, models.ErrNotFound) {
			return ErrResetLinkInvalid
		}
		if err != nil {
			return err
		}
		locked, err := tx.LockUserByName(ctx, u.Username)
		if err != nil {
			return err
		}
		if locked.ID != id || locked.Disabled() {
			return ErrResetLinkInvalid
		}
		return replacePassword(ctx, tx, id, hash, nil)
	})
	if err != nil {
		return nil, err
	}
	p.auth.forgetUser(ctx, u.ID)
	p.record(ctx, events.UserPasswordReset, u.ID, u.Username, map[string]any{"via": "link"})
	return u, nil
}

// ResetPassword sets the named person's password from the command line,
// the way back for a site admin who lost theirs: every sign-in of theirs
// ends and any reset link goes. A disabled account stays disabled.
func (p *People) ResetPassword(ctx context.Context, username, next string) (*models.User, error) {
	if err := checkNewPassword(next); err != nil {
		return nil, err
	}
	u, err := p.user(ctx, username)
	if err != nil {
		return nil, err
	}
	if err := p.setPassword(ctx, "", u.ID, next, nil); err != nil {
		return nil, err
	}
	p.record(ctx, events.UserPasswordReset, 0, u.Username, map[string]any{"via": "command line"})
	return u, nil
}

// Disable stops the named person from signing in, for a site admin: their
// sign-ins and reset link go, then their edit sessions end with their
// shells and commands. The last site admin who can sign in, and the
// admin themselves, stay enabled.
func (p *People) Disable(ctx context.Context, actor *models.User, username string) (*models.User, error) {
	if err := siteAdmin(actor); err != nil {
		return nil, err
	}
	changed := false
	u, err := p.change(ctx, username, func(tx *models.Store, u *models.User, admins []int64) error {
		switch {
		case u.ID == actor.ID:
			return ErrOwnAccount
		case u.Disabled():
			return nil
		case u.IsAdmin && len(admins) <= 1:
			return ErrLastSiteAdmin
		}
		now := p.auth.now()
		if err := tx.SetUserDisabled(ctx, u.ID, &now); err != nil {
			return err
		}
		if _, err := tx.DeleteLoginSessionsOf(ctx, u.ID, nil); err != nil {
			return err
		}
		changed, u.DisabledAt = true, &now
		return tx.DeletePasswordResetsOf(ctx, u.ID)
	})
	if err != nil || !changed {
		return u, err
	}
	p.record(ctx, events.UserDisabled, actor.ID, u.Username, nil)
	// The row is disabled first: an edit session being opened meanwhile
	// either sees it and is refused, or is committed and found here.
	if p.sessions != nil {
		if err := p.sessions.EndPersonSessions(ctx, u.ID, actor.ID); err != nil {
			return u, fmt.Errorf("auth: end the sessions of %s: %w", u.Username, err)
		}
	}
	return u, nil
}

// Enable lets a disabled person sign in again, for a site admin.
func (p *People) Enable(ctx context.Context, actor *models.User, username string) (*models.User, error) {
	if err := siteAdmin(actor); err != nil {
		return nil, err
	}
	changed := false
	u, err := p.change(ctx, username, func(tx *models.Store, u *models.User, _ []int64) error {
		if !u.Disabled() {
			return nil
		}
		changed, u.DisabledAt = true, nil
		return tx.SetUserDisabled(ctx, u.ID, nil)
	})
	if err == nil && changed {
		p.record(ctx, events.UserEnabled, actor.ID, u.Username, nil)
	}
	return u, err
}

// SetSiteAdmin grants or removes the site admin role, for a site admin,
// never taking it from the last site admin who can sign in.
func (p *People) SetSiteAdmin(ctx context.Context, actor *models.User, username string, admin bool) (*models.User, error) {
	if err := siteAdmin(actor); err != nil {
		return nil, err
	}
	changed := false
	u, err := p.change(ctx, username, func(tx *models.Store, u *models.User, admins []int64) error {
		switch {
		case u.IsAdmin == admin:
			return nil
		case !admin && !u.Disabled() && len(admins) <= 1:
			return ErrLastSiteAdmin
		}
		changed, u.IsAdmin = true, admin
		return tx.SetSiteAdmin(ctx, u.ID, admin)
	})
	if err != nil || !changed {
		return u, err
	}
	typ := events.UserAdminRemoved
	if admin {
		typ = events.UserAdminGranted
	}
	p.record(ctx, typ, actor.ID, u.Username, nil)
	return u, nil
}

// change runs fn on the named person's locked row in a transaction that
// also holds the rows of the site admins who can sign in (their ids in
// admins), so no two changes at once each count on the other's admin.
// The person's sign-ins in this instance's memory are forgotten after.
func (p *People) change(ctx context.Context, username string, fn func(tx *models.Store, u *models.User, admins []int64) error) (*models.User, error) {
	var u *models.User
	err := p.store.Tx(ctx, func(tx *models.Store) error {
		admins, err := tx.LockSiteAdmins(ctx)
		if err != nil {
			return err
		}
		if u, err = tx.LockUserByName(ctx, username); errors.Is(err, models.ErrNotFound) {
			return ErrNoSuchUser
		} else if err != nil {
			return err
		}
		return fn(tx, u, admins)
	})
	if err != nil {
		return nil, err
	}
	p.auth.forgetUser(ctx, u.ID)
	return u, nil
}

// setPassword hashes next in address's turn and stores it, ending the
// person's sign-ins but keep.
func (p *People) setPassword(ctx context.Context, address string, userID int64, next string, keep []byte) error {
	hash, err := p.hash(ctx, address, next)
	if err != nil {
		return err
	}
	err = p.store.Tx(ctx, func(tx *models.Store) error { return replacePassword(ctx, tx, userID, hash, keep) })
	if err != nil {
		return err
	}
	p.auth.forgetUser(ctx, userID)
	return nil
}

// replacePassword stores hash as the password and ends every sign-in but
// keep and any reset link: whoever knew the old password, or holds a link
// made before, is out.
func replacePassword(ctx context.Context, tx *models.Store, userID int64, hash string, keep []byte) error {
	if err := tx.SetUserPassword(ctx, userID, hash); err != nil {
		return err
	}
	if _, err := tx.DeleteLoginSessionsOf(ctx, userID, keep); err != nil {
		return err
	}
	return tx.DeletePasswordResetsOf(ctx, userID)
}

func (p *People) hash(ctx context.Context, address, password string) (string, error) {
	var hash string
	var err error
	if gerr := p.auth.hashing.run(ctx, address, func() { hash, err = HashPassword(password) }); gerr != nil {
		return "", gerr
	}
	return hash, err
}

func (p *People) user(ctx context.Context, username string) (*models.User, error) {
	u, err := p.store.UserByName(ctx, username)
	if errors.Is(err, models.ErrNotFound) {
		return nil, ErrNoSuchUser
	}
	return u, err
}

// record logs a change of username's account made by actor (0: the
// command line). The change is made; a failure to record it is logged.
func (p *People) record(ctx context.Context, typ string, actor int64, username string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["user"] = username
	if err := p.events.Record(context.WithoutCancel(ctx), events.Event{Type: typ, ActorID: actor, Data: data}); err != nil {
		p.log.Warn("event not recorded", "type", typ, "user", username, "err", err)
	}
}

// siteAdmin re-checks in the service what the /admin routes check: anyone
// else is answered as if nothing were there.
func siteAdmin(actor *models.User) error {
	if actor == nil || !actor.IsAdmin {
		return ErrSiteAdminsOnly
	}
	return nil
}

// checkNewPassword holds a new password to the rules a new user's has.
func checkNewPassword(password string) error {
	if utf8.RuneCountInString(password) < MinPasswordLength || len(password) > maxPasswordLength {
		return ErrWeakPassword
	}
	return nil
}
