package fault_test

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"testing"
	"time"

	"atelier/fault"
)

var (
	errArchived = fault.New(fault.Conflict, "archived", "things: the thing is archived", "The thing is archived.")
	errBadPath  = fault.New(fault.BadInput, "bad_path", "things: bad path", "Bad path.")
	errBadBox   = fault.New(fault.BadInput, "bad_box", "things: bad box", "Bad box.")
)

func faultOf(t *testing.T, err error) fault.Fault {
	t.Helper()
	var fe fault.Error
	if !errors.As(err, &fe) {
		t.Fatalf("%v describes no fault", err)
	}
	return fe.Fault()
}

// A declared error keeps its Go text for logs, and its kind, reason and
// message through any wrapping with %w.
func TestNewThroughWrapping(t *testing.T) {
	err := fmt.Errorf("svc: archive 7: %w", errArchived)
	if !errors.Is(err, errArchived) || errors.Is(err, errBadPath) {
		t.Fatal("errors.Is does not tell declared errors apart")
	}
	if err.Error() != "svc: archive 7: things: the thing is archived" {
		t.Fatalf("text %q", err.Error())
	}
	want := fault.Fault{Kind: fault.Conflict, Reason: "archived", Message: "The thing is archived."}
	if got := faultOf(t, err); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

// Detailf continues both the text and the message; a fault among its
// arguments shows its message as part of the sentence, never its package
// prefix, and every %w stays reachable.
func TestDetailf(t *testing.T) {
	inner := fault.Detailf(errBadPath, " %q: %s", "../x", "the path climbs out")
	err := fault.Detailf(errBadBox, ": %q: %w", "../x", inner)
	if want := `things: bad box: "../x": things: bad path "../x": the path climbs out`; err.Error() != want {
		t.Fatalf("text %q, want %q", err.Error(), want)
	}
	f := faultOf(t, fmt.Errorf("svc: import: %w", err))
	if want := `Bad box: "../x": bad path "../x": the path climbs out.`; f.Message != want {
		t.Fatalf("message %q, want %q", f.Message, want)
	}
	if f.Kind != fault.BadInput || f.Reason != "bad_box" {
		t.Fatalf("got %#v", f)
	}
	if !errors.Is(err, errBadBox) || !errors.Is(err, errBadPath) {
		t.Fatal("a detailed error lost what it wraps")
	}
	if fi := faultOf(t, inner); fi.Message != `Bad path "../x": the path climbs out.` || fi.Reason != "bad_path" {
		t.Fatalf("inner %#v", fi)
	}
}

// An error of the system inside a detail is shown by its own text.
func TestDetailfWrapsPlainErrors(t *testing.T) {
	err := fault.Detailf(errBadBox, ": %q: %w", "a", &fs.PathError{Op: "open", Path: "/t/a", Err: fs.ErrExist})
	if got := faultOf(t, err).Message; got != `Bad box: "a": open /t/a: file already exists.` {
		t.Fatalf("message %q", got)
	}
	if !errors.Is(err, fs.ErrExist) {
		t.Fatal("lost the wrapped system error")
	}
}

// An error nobody declared has no fault, so the handlers answer it as their
// own 500.
func TestPlainErrorHasNoFault(t *testing.T) {
	var fe fault.Error
	if errors.As(fmt.Errorf("svc: %w", errors.New("db down")), &fe) {
		t.Fatal("a plain error describes a fault")
	}
}

// A fault that passes says when to try again, and stays the error it was.
func TestWithRetryAfter(t *testing.T) {
	busy := fault.WithRetryAfter(fault.New(fault.Limit, "busy", "things: busy", "Busy."), 5*time.Second)
	err := fmt.Errorf("svc: %w", busy)
	if !errors.Is(err, busy) {
		t.Fatal("errors.Is does not find the error through WithRetryAfter")
	}
	want := fault.Fault{Kind: fault.Limit, Reason: "busy", Message: "Busy.", RetryAfter: 5 * time.Second}
	if got := faultOf(t, err); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	if plain := errors.New("plain"); fault.WithRetryAfter(plain, time.Second) != plain {
		t.Error("an error without a fault gained one")
	}
}
