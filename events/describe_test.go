package events_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"atelier/events"
	"atelier/models"
)

// eventTypes reads every event type this package declares: each string
// constant of its files spelled as the events table's CHECK wants a type.
func eventTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	format := regexp.MustCompile(`^[a-z]+(\.[a-z_]+)+$`)
	var types []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, constTypes(f, format)...)
	}
	if len(types) < 10 {
		t.Fatalf("found only %v", types)
	}
	return types
}

// constTypes are the string constants of f that match format.
func constTypes(f *ast.File, format *regexp.Regexp) []string {
	var types []string
	ast.Inspect(f, func(n ast.Node) bool {
		if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
			for _, spec := range d.Specs {
				for _, v := range spec.(*ast.ValueSpec).Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, _ := strconv.Unquote(lit.Value); format.MatchString(s) {
							types = append(types, s)
						}
					}
				}
			}
		}
		return true
	})
	return types
}

// event is a stored event as the feed reads it.
func event(typ string, data map[string]any, actor, owner string) models.NamedEvent {
	raw, _ := json.Marshal(data)
	e := models.NamedEvent{Event: models.Event{ID: 1, Type: typ, Data: raw, CreatedAt: time.Now()}}
	if actor != "" {
		e.Actor = &actor
	}
	if owner != "" {
		e.Owner = &owner
	}
	return e
}

// Every type of event this version records reads as a sentence of its
// own, in each of the shapes its data takes: none falls back to the words
// of its type, and none shows data or a type.
func TestEveryEventReadsAsASentence(t *testing.T) {
	variants := map[string][]map[string]any{
		events.SessionClosed: {
			{"session": "edit_1", "reason": "discarded"}, {"session": "edit_1", "reason": "submitted"},
			{"session": "edit_1", "reason": "idle"}, {"session": "edit_1", "reason": "max_age"},
			{"session": "edit_1", "reason": "archived"}, {"session": "edit_1", "reason": "project_deleted"},
			{"session": "edit_1", "reason": "admin"}, {"session": "edit_1", "reason": "revoked"},
		},
		events.ChangeMoved: {
			{"changeId": 7, "status": "verifying"}, {"changeId": 7, "status": "withdrawn"},
			{"changeId": 7, "status": "superseded", "paths": []string{"a.go", "b.go"}},
			{"changeId": 7, "status": "composed", "recomposed": true, "base": strings.Repeat("a", 40)},
		},
		events.ChangeWaiting: {
			{"changeId": 7, "status": "composed", "reason": "approval"},
			{"changeId": 7, "status": "verified", "reason": "dirty_worktree"},
		},
		events.ChangeVerified: {
			{"changeId": 7, "status": "verified", "exitCode": 0, "durationMs": 12},
			{"changeId": 7, "status": "verified", "approvedBy": "bob"},
		},
		events.ChangeComposed: {{"changeId": 7, "status": "composed", "session": "edit_1"}, {"changeId": 7, "status": "composed"}},
		events.CodeImported:   {{"project": 3, "from": "https://example.com/x.git"}, {"project": 3}},
	}
	types := eventTypes(t)
	seen := map[string]string{}
	for _, typ := range types {
		shapes := variants[typ]
		if shapes == nil {
			shapes = []map[string]any{{"session": "edit_1", "changeId": 7, "status": "failed", "exitCode": 1}}
		}
		for _, data := range shapes {
			for _, actor := range []string{"", "ann"} {
				l := events.Describe(event(typ, data, actor, "bob"))
				where := typ + " " + string(mustJSON(data))
				if l.Text == "" || strings.Contains(l.Text, "no words for") {
					t.Errorf("%s has no sentence: %q", where, l.Text)
				}
				for _, internal := range append([]string{"{", "}", "[", "\"", "_"}, types...) {
					if strings.Contains(l.Text, internal) {
						t.Errorf("%s reads %q, with %q in it", where, l.Text, internal)
					}
				}
				if actor == "" && l.Actor != events.System || actor != "" && l.Actor != actor {
					t.Errorf("%s: actor %q", where, l.Actor)
				}
				if other, ok := seen[l.Text]; ok && other != where && actor == "ann" {
					t.Errorf("%s and %s read alike: %q", where, other, l.Text)
				}
				seen[l.Text] = where
			}
		}
	}
	// A type a newer version records reads as its words, without its data.
	l := events.Describe(event("change.reviewed_twice", map[string]any{"secret": "x"}, "ann", ""))
	if l.Text != "did something Atelier has no words for yet (change reviewed twice)" {
		t.Errorf("an unknown type reads %q", l.Text)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Whose session ended reads from the actor's side.
func TestSessionEndsSayWhose(t *testing.T) {
	for _, tc := range []struct {
		actor, owner, reason, want string
	}{
		{"ann", "ann", "discarded", "discarded their edit session"},
		{"", "bob", "idle", "ended bob's edit session: nobody used it for too long"},
		{"root", "bob", "admin", "ended bob's edit session as a site admin"},
		{"ann", "", "revoked", "ended an edit session: they may no longer edit the project"},
	} {
		got := events.Describe(event(events.SessionClosed, map[string]any{"session": "edit_1", "reason": tc.reason}, tc.actor, tc.owner)).Text
		if got != tc.want {
			t.Errorf("%+v reads %q", tc, got)
		}
	}
}

// A submit's three events read as one sentence, and a step recorded again
// right after itself reads once; the same words in another project are
// another step.
func TestLinesTellEachStepOnce(t *testing.T) {
	at := func(e models.NamedEvent, id int64, project string) models.NamedEvent {
		e.ID = id
		if project != "" {
			e.Project = &project
		}
		return e
	}
	es := []models.NamedEvent{ // newest first, as the feed reads them
		at(event(events.ChangeMoved, map[string]any{"changeId": 7, "status": "verifying"}, "", ""), 9, "p"),
		at(event(events.ChangeMoved, map[string]any{"changeId": 7, "status": "verifying"}, "", ""), 8, "p"),
		at(event(events.ChangeComposed, map[string]any{"changeId": 7, "session": "edit_1"}, "ann", ""), 7, "p"),
		at(event(events.SessionSubmitted, map[string]any{"changeId": 7, "session": "edit_1"}, "ann", "ann"), 6, "p"),
		at(event(events.SessionClosed, map[string]any{"reason": "submitted", "session": "edit_1"}, "ann", "ann"), 5, "p"),
		at(event(events.SessionClosed, map[string]any{"reason": "submitted", "session": "edit_2"}, "ann", "ann"), 4, "p"),
		at(event(events.CodeImported, map[string]any{"from": "a.tar.gz"}, "ann", ""), 3, "p"),
		at(event(events.CodeImported, map[string]any{"from": "a.tar.gz"}, "ann", ""), 2, "q"),
	}
	var got []int64
	for _, l := range events.Lines(es) {
		got = append(got, l.ID)
	}
	if want := []int64{9, 7, 4, 3, 2}; !slices.Equal(got, want) {
		t.Fatalf("lines of events %v, want %v", got, want)
	}
}
