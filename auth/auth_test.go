package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"atelier/auth"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPasswordHash(t *testing.T) {
	h1, err := auth.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := auth.HashPassword("correct horse")
	if h1 == h2 {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	if !strings.HasPrefix(h1, "$argon2id$v=19$") {
		t.Fatalf("hash %q is not argon2id", h1)
	}
	if ok, err := auth.VerifyPassword(h1, "correct horse"); !ok || err != nil {
		t.Fatalf("right password: %v %v", ok, err)
	}
	if ok, _ := auth.VerifyPassword(h1, "correct horsE"); ok {
		t.Fatal("wrong password accepted")
	}
	for _, bad := range []string{"", "plain", "$argon2id$v=19$m=1,t=1,p=1$$", "$bcrypt$x$y$z$w"} {
		if ok, err := auth.VerifyPassword(bad, "x"); ok || err == nil {
			t.Errorf("malformed hash %q: ok=%v err=%v", bad, ok, err)
		}
	}
}

// The whole permission table, spelled out: a change to it must change this
// test too.
func TestCan(t *testing.T) {
	want := map[auth.Action][3]bool{ // owner, admin, member
		auth.CodeRead:      {true, true, true},
		auth.CodeEdit:      {true, true, false},
		auth.ProjectManage: {true, true, false},
		auth.ProjectOwn:    {true, false, false},
		"no.such.action":   {false, false, false},
	}
	roles := []auth.Role{auth.RoleOwner, auth.RoleAdmin, auth.RoleMember}
	for action, row := range want {
		for i, role := range roles {
			if got := auth.Can(role, action); got != row[i] {
				t.Errorf("Can(%s, %s) = %v, want %v", role, action, got, row[i])
			}
		}
		if auth.Can("stranger", action) {
			t.Errorf("an unknown role may %s", action)
		}
	}
}

func TestSessionsExpire(t *testing.T) {
	store := dbtest.Store(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	svc, err := auth.NewService(store, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateUser(ctx, "ann", "password1", false); err != nil {
		t.Fatal(err)
	}
	token, ls, _, err := svc.Login(ctx, "ann", "password1", "")
	if err != nil {
		t.Fatal(err)
	}
	if ls.CSRFToken == "" || ls.CSRFToken == token {
		t.Fatal("the CSRF token is empty or equals the session token")
	}
	if _, u, err := svc.Resolve(ctx, token); err != nil || u.Username != "ann" {
		t.Fatalf("fresh session: %v", err)
	}
	if _, _, err := svc.Resolve(ctx, token+"x"); !errors.Is(err, auth.ErrSignInRequired) {
		t.Fatalf("forged token: %v", err)
	}
	now = now.Add(auth.SessionTTL + time.Second)
	if _, _, err := svc.Resolve(ctx, token); !errors.Is(err, auth.ErrSignInRequired) {
		t.Fatalf("expired session resolved: %v", err)
	}
	if n, err := store.DeleteExpiredLoginSessions(ctx, now); err != nil || n != 1 {
		t.Fatalf("sweep removed %d, %v", n, err)
	}
}

func TestFirstAdmin(t *testing.T) {
	store := dbtest.Store(t)
	ctx := context.Background()
	svc, err := auth.NewService(store, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.EnsureFirstAdmin(ctx, "short"); !errors.Is(err, auth.ErrWeakPassword) {
		t.Fatalf("a weak ATELIER_ADMIN_PASSWORD: %v", err)
	}
	created, pw, err := svc.EnsureFirstAdmin(ctx, "")
	if err != nil || !created || len(pw) < auth.MinPasswordLength {
		t.Fatalf("first start: created=%v pw=%q err=%v", created, pw, err)
	}
	if _, _, _, err := svc.Login(ctx, "admin", pw, ""); err != nil {
		t.Fatalf("the printed password does not sign in: %v", err)
	}
	if created, _, err := svc.EnsureFirstAdmin(ctx, "another-one"); err != nil || created {
		t.Fatalf("second start created an admin again: %v %v", created, err)
	}
	u, err := store.UserByName(ctx, "admin")
	if err != nil || !u.IsAdmin {
		t.Fatalf("admin is not a site admin: %+v %v", u, err)
	}
}
