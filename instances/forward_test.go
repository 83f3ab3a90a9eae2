package instances_test

import (
	"testing"
	"time"

	"atelier/instances"
)

// A mark holds for its request only, from the secret's holders only, and
// only for a while.
func TestForwardMarks(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	mark := instances.SignForward(secret, "a", "POST", "/projects/1/sessions/edit_x/commands", t0)
	if !instances.VerifyForward(secret, mark, "POST", "/projects/1/sessions/edit_x/commands", t0.Add(5*time.Second)) {
		t.Fatal("a fresh mark of the request was refused")
	}
	for name, ok := range map[string]bool{
		"another secret": instances.VerifyForward([]byte("another secret, just as long......"), mark, "POST", "/projects/1/sessions/edit_x/commands", t0),
		"another method": instances.VerifyForward(secret, mark, "GET", "/projects/1/sessions/edit_x/commands", t0),
		"another URI":    instances.VerifyForward(secret, mark, "POST", "/projects/2/sessions/edit_x/commands", t0),
		"an old mark":    instances.VerifyForward(secret, mark, "POST", "/projects/1/sessions/edit_x/commands", t0.Add(time.Minute)),
		"a mark to come": instances.VerifyForward(secret, mark, "POST", "/projects/1/sessions/edit_x/commands", t0.Add(-time.Minute)),
		"another sender": instances.VerifyForward(secret, "b"+mark[1:], "POST", "/projects/1/sessions/edit_x/commands", t0),
		"no secret":      instances.VerifyForward(nil, instances.SignForward(nil, "a", "POST", "/", t0), "POST", "/", t0),
		"garbage":        instances.VerifyForward(secret, "a b", "POST", "/", t0),
	} {
		if ok {
			t.Errorf("%s: the mark was taken", name)
		}
	}
}
