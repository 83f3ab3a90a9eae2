package events

import (
	"encoding/json"
	"fmt"

	"atelier/models"
)

// Line is an event as a person reads it in the dashboard's feed.
type Line struct {
	ID      int64
	Type    string
	At      string // RFC 3339, UTC
	Actor   string // who did it; "Atelier" for the system
	Project string // the project's name, or "" for site-wide events
	Text    string // what happened, in words
}

// whyEnded says, in the feed, why a session ended.
var whyEnded = map[string]string{
	"discarded":       "discarded it",
	"idle":            "was ended: idle too long",
	"max_age":         "was ended: too old",
	"archived":        "was ended: project archived",
	"project_deleted": "was ended: project deleted",
	"submitted":       "submitted it",
	"admin":           "was ended by a site admin",
}

// Describe turns a stored event into a line of the feed. Unknown types
// still read as their type, so a new kind of event is never hidden.
func Describe(e models.NamedEvent) Line {
	l := Line{ID: e.ID, Type: e.Type, At: e.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), Actor: "Atelier"}
	if e.Actor != nil {
		l.Actor = *e.Actor
	}
	if e.Project != nil {
		l.Project = *e.Project
	}
	var data map[string]any
	_ = json.Unmarshal(e.Data, &data) // a row with odd data still gets a line
	session, _ := data["session"].(string)
	switch e.Type {
	case SessionOpened:
		l.Text = "opened edit session " + session
	case SessionClosed:
		reason, _ := data["reason"].(string)
		why, ok := whyEnded[reason]
		if !ok {
			why = "ended (" + reason + ")"
		}
		l.Text = "edit session " + session + ": " + why
	case "code.import":
		from, _ := data["from"].(string)
		l.Text = "imported code" + map[bool]string{true: " from " + from, false: ""}[from != ""]
	default:
		l.Text = fmt.Sprintf("%s %s", e.Type, string(e.Data))
	}
	return l
}
