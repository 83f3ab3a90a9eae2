package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"atelier/models"
)

// Line is an event as a person reads it: who did what, in words, and when.
// Pages print Actor and then Text, so Text is the rest of a sentence whose
// subject is Actor ("alice" "released Change #1").
type Line struct {
	ID      int64     `json:"id"`
	Type    string    `json:"type"` // the event's type, for scripts; pages never print it
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"` // who did it; "Atelier" for the system
	Project string    `json:"project,omitempty"`
	Text    string    `json:"text"`
}

// System is the actor of what nobody did by hand: a sweep, the pipeline.
const System = "Atelier"

// whyEnded finishes "ended X's edit session" for each reason a session ends
// without its owner's own doing.
var whyEnded = map[string]string{
	"idle":            ": nobody used it for too long",
	"max_age":         ": it was open as long as a session may be",
	"archived":        ": the project was archived",
	"project_deleted": ": the project was deleted",
	"admin":           " as a site admin",
	"revoked":         ": they may no longer edit the project",
	"disabled":        ": the account was disabled",
}

// data is what events carry, as far as sentences need it.
type data struct {
	Session    string   `json:"session"`
	Reason     string   `json:"reason"`
	ChangeID   int64    `json:"changeId"`
	Status     string   `json:"status"`
	From       string   `json:"from"`
	ApprovedBy string   `json:"approvedBy"`
	ExitCode   *int     `json:"exitCode"`
	Paths      []string `json:"paths"`
	Recomposed bool     `json:"recomposed"`
	User       string   `json:"user"` // the person an account event is about
	Via        string   `json:"via"`  // how a password was reset
}

// Describe turns a stored event into a sentence. A type it does not know
// (one recorded by a newer version) reads as its words, never as its data.
func Describe(e models.NamedEvent) Line {
	l := Line{ID: e.ID, Type: e.Type, At: e.CreatedAt, Actor: System}
	if e.Actor != nil {
		l.Actor = *e.Actor
	}
	if e.Project != nil {
		l.Project = *e.Project
	}
	var d data
	_ = json.Unmarshal(e.Data, &d) // a row with odd data still gets a sentence
	l.Text = sentence(e, l.Actor, d)
	return l
}

func sentence(e models.NamedEvent, actor string, d data) string {
	change := fmt.Sprintf("Change #%d", d.ChangeID)
	switch e.Type {
	case SessionOpened:
		return "opened an edit session"
	case SessionClosed:
		whose := sessionOf(actor, e.Owner)
		switch d.Reason {
		case "discarded":
			return "discarded " + whose + " edit session"
		case "submitted":
			return "submitted " + whose + " edit session"
		}
		return "ended " + whose + " edit session" + whyEnded[d.Reason]
	case SessionSubmitted:
		return "submitted an edit session as " + change
	case ChangeComposed:
		if d.Session != "" {
			return "submitted " + change + " from an edit session"
		}
		return "wrote " + change + " by editing one file on the Code page"
	case ChangeWaiting:
		if d.Reason == models.WaitDirtyWorktree {
			return "could not release " + change + " yet: the project's folder has uncommitted changes, or its branch moved"
		}
		return "set " + change + " to wait for an owner's or admin's approval: the project has no check command"
	case ChangeMoved:
		switch d.Status {
		case models.ChangeVerifying:
			return "started the check of " + change
		case models.ChangeWithdrawn:
			return "withdrew " + change
		case models.ChangeSuperseded:
			return "tried to release " + change + ", but canonical had changed " + listed(d.Paths) + " since its base: it is superseded"
		case models.ChangeComposed:
			return "released " + change + " after canonical had moved: it was composed again on canonical and is checked again"
		}
		return "moved " + change + " on"
	case ChangeVerified:
		if d.ApprovedBy != "" {
			return "approved " + change
		}
		return "checked " + change + ": the check passed"
	case ChangeFailed:
		if d.ExitCode != nil {
			return fmt.Sprintf("checked %s: the check failed with exit code %d", change, *d.ExitCode)
		}
		return "checked " + change + ": the check failed"
	case ChangeReleased:
		return "released " + change
	case CodeImported:
		if d.From != "" {
			return "imported code from " + d.From
		}
		return "imported code"
	}
	if text, ok := personSentence(e.Type, d); ok {
		return text
	}
	return "did something Atelier has no words for yet (" + strings.NewReplacer(".", " ", "_", " ").Replace(e.Type) + ")"
}

// sessionOf says whose session it was, as the actor speaks of it.
func sessionOf(actor string, owner *string) string {
	switch {
	case owner == nil:
		return "an"
	case *owner == actor:
		return "their"
	}
	return *owner + "'s"
}

// listed names a few paths and counts the rest.
func listed(paths []string) string {
	switch {
	case len(paths) == 0:
		return "its paths"
	case len(paths) <= 3:
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:3], ", "), len(paths)-3)
}

// Lines describes events in the order given, each step once: a submit
// records three events (the session closed, the session submitted, the
// Change composed), which read as the Change's one sentence, and a step
// recorded again right after itself (a check started again after a
// restart) reads once.
func Lines(es []models.NamedEvent) []Line {
	submitted := map[string]bool{} // sessions whose submit is listed
	composed := map[int64]bool{}   // Changes whose composing is listed
	for _, e := range es {
		var d data
		_ = json.Unmarshal(e.Data, &d)
		switch e.Type {
		case SessionSubmitted:
			submitted[d.Session] = true
		case ChangeComposed:
			composed[d.ChangeID] = true
		}
	}
	out := make([]Line, 0, len(es))
	for _, e := range es {
		var d data
		_ = json.Unmarshal(e.Data, &d)
		if e.Type == SessionClosed && d.Reason == "submitted" && submitted[d.Session] ||
			e.Type == SessionSubmitted && composed[d.ChangeID] {
			continue
		}
		l := Describe(e)
		if n := len(out); n > 0 && out[n-1].Type == l.Type && out[n-1].Text == l.Text && out[n-1].Actor == l.Actor && out[n-1].Project == l.Project {
			continue
		}
		out = append(out, l)
	}
	return out
}
