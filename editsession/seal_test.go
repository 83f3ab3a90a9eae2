package editsession

import (
	"errors"
	"testing"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
)

// TestSeal: only the session's owner seals it; a seal rolled back with its
// transaction leaves the session taking saves; once a seal commits, no
// save lands, a second seal says the session was submitted, and
// FinishSubmitted leaves nothing of it behind.
func TestSeal(t *testing.T) {
	f := newFixture(t)
	sess := f.open()
	if _, err := f.save(sess, "a.txt", "a", Precondition{}); err != nil {
		t.Fatal(err)
	}
	seal := func(acc *projects.Access, commit bool) (*models.CodeSession, error) {
		var cs *models.CodeSession
		rollback := errors.New("rolled back")
		err := f.store.Tx(f.ctx, func(tx *models.Store) error {
			var err error
			if cs, err = f.sessions.Seal(f.ctx, tx, acc, sess.ID); err != nil || commit {
				return err
			}
			return rollback
		})
		if errors.Is(err, rollback) {
			err = nil
		}
		return cs, err
	}

	bob := &models.User{Username: "bob", PasswordHash: "unused"}
	if err := f.store.CreateUser(f.ctx, bob); err != nil {
		t.Fatal(err)
	}
	if _, err := seal(&projects.Access{Project: f.owner.Project, User: bob, Role: auth.RoleOwner}, true); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob seals ann's session: %v, want ErrNotFound", err)
	}
	if _, err := seal(f.owner, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.save(sess, "b.txt", "b", Precondition{}); err != nil {
		t.Errorf("a save after a seal that was rolled back: %v", err)
	}

	cs, err := seal(f.owner, true)
	if err != nil || cs.ID != sess.ID {
		t.Fatalf("Seal = %v, %v", cs, err)
	}
	var g *GoneError
	if _, err := f.save(sess, "c.txt", "c", Precondition{}); !errors.As(err, &g) || g.Reason != ReasonSubmitted {
		t.Errorf("a save into a sealed session: %v, want it gone as submitted", err)
	}
	if _, err := seal(f.owner, true); !errors.As(err, &g) || g.Reason != ReasonSubmitted {
		t.Errorf("a second seal: %v, want it gone as submitted", err)
	}
	if err := f.sessions.FinishSubmitted(f.ctx, cs, f.owner.User.ID, 1); err != nil {
		t.Fatal(err)
	}
	_, err = f.sessions.Get(f.ctx, f.owner, sess.ID, true)
	f.gone(sess, err, ReasonSubmitted)
}
