package changes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"atelier/auth"
	"atelier/events"
	"atelier/gitsvc"
	"atelier/models"
	"atelier/projects"
)

// listLength is how many changes a project's list shows.
const listLength = 200

// List returns the project's changes, newest first. Every member may see
// them.
func (s *Service) List(ctx context.Context, acc *projects.Access) ([]models.Change, error) {
	return s.db.ChangesOf(ctx, acc.Project.ID, listLength)
}

// Detail is a change with everything its page shows.
type Detail struct {
	*models.Change
	Evidence []models.Evidence  `json:"evidence"`
	Sets     []models.ChangeSet `json:"sets"`
	Timeline []events.Line      `json:"timeline"` // each step once, as sentences
}

// Get returns one change of the project with its evidence, sets and
// timeline.
func (s *Service) Get(ctx context.Context, acc *projects.Access, id int64) (*Detail, error) {
	ch, err := s.changeOf(ctx, acc, id)
	if err != nil {
		return nil, err
	}
	d := &Detail{Change: ch}
	if d.Evidence, err = s.db.EvidenceOf(ctx, id); err != nil {
		return nil, err
	}
	if d.Sets, err = s.db.ChangeSetsOf(ctx, id); err != nil {
		return nil, err
	}
	es, err := s.db.ChangeEvents(ctx, ch.ProjectID, id)
	if err != nil {
		return nil, err
	}
	// The event of its composing is only logged when it cannot be
	// recorded; the Change itself still says when and by whom.
	if len(es) == 0 || es[0].Type != events.ChangeComposed {
		data, _ := json.Marshal(map[string]any{"changeId": ch.ID})
		first := models.NamedEvent{Event: models.Event{Type: events.ChangeComposed, Data: data, CreatedAt: ch.CreatedAt}}
		if ch.AuthorName != "" {
			first.Actor = &ch.AuthorName
		}
		es = append([]models.NamedEvent{first}, es...)
	}
	d.Timeline = events.Lines(es)
	return d, nil
}

// FileDiff is one path of a change: its unified diff and both sides.
type FileDiff struct {
	Path    string `json:"path"`
	Diff    string `json:"diff"`
	Binary  bool   `json:"binary"`
	Deleted bool   `json:"deleted"`
	Added   bool   `json:"added"`
	Old     []string
	New     []string
}

// maxDiffBytes bounds each side of a file's diff on the page.
const maxDiffBytes = 1 << 20

// Diffs returns the per-file diffs of the change's commit against its
// base, read from the author's workspace fork.
func (s *Service) Diffs(ctx context.Context, acc *projects.Access, ch *models.Change) ([]FileDiff, error) {
	if ch.AuthorID == nil {
		return nil, nil
	}
	fork, err := s.git.OpenBare(workspaceFork(ch.ProjectID, *ch.AuthorID))
	if err != nil {
		return nil, err
	}
	out := make([]FileDiff, 0, len(ch.Paths))
	for _, p := range ch.Paths {
		old, oldOK, err := s.blob(ctx, fork, ch.BaseCommit, p)
		if err != nil {
			return nil, err
		}
		cur, curOK, err := s.blob(ctx, fork, ch.CommitSHA, p)
		if err != nil {
			return nil, err
		}
		fd := FileDiff{Path: p, Added: !oldOK, Deleted: !curOK}
		if strings.IndexByte(string(old), 0) >= 0 || strings.IndexByte(string(cur), 0) >= 0 {
			fd.Binary = true
			out = append(out, fd)
			continue
		}
		from, to := "a/"+p, "b/"+p
		if !oldOK {
			from = "/dev/null"
		}
		if !curOK {
			to = "/dev/null"
		}
		fd.Old, fd.New = lines(old), lines(cur)
		fd.Diff, err = difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: fd.Old, B: fd.New, FromFile: from, ToFile: to, Context: 3})
		if err != nil {
			return nil, err
		}
		out = append(out, fd)
	}
	return out, nil
}

func (s *Service) blob(ctx context.Context, r *gitsvc.Repo, commit, path string) ([]byte, bool, error) {
	b, _, err := s.git.ReadBlob(ctx, r, commit, path)
	if err != nil {
		if isMissing(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if len(b) > maxDiffBytes {
		b = b[:maxDiffBytes]
	}
	return b, true, nil
}

// lines keeps each line's own ending, so CRLF and a missing final newline
// show as they are.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	ls := strings.SplitAfter(string(b), "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	} else {
		ls[len(ls)-1] += "\n\\ No newline at end of file\n"
	}
	return ls
}

// Settings is what the settings page changes.
type Settings struct {
	CheckCommand string `json:"checkCommand"`
}

// SettingsOf returns the project's settings.
func (s *Service) SettingsOf(acc *projects.Access) Settings {
	if acc.Project.CheckCommand == nil {
		return Settings{}
	}
	return Settings{CheckCommand: *acc.Project.CheckCommand}
}

// SetSettings records the project's check command ("" for none: each
// change then waits for an approval). Owners and admins only.
func (s *Service) SetSettings(ctx context.Context, acc *projects.Access, in Settings) error {
	if !acc.Can(auth.CodeEdit) {
		return auth.ErrForbidden
	}
	if acc.Project.Archived() {
		return projects.ErrArchived
	}
	cmd := strings.TrimSpace(in.CheckCommand)
	var p *string
	if cmd != "" {
		if len([]rune(cmd)) > 1000 || strings.ContainsAny(cmd, "\n\r\x00") {
			return ErrBadCheck
		}
		p = &cmd
	}
	if err := s.db.SetCheckCommand(ctx, acc.Project.ID, p); err != nil {
		return err
	}
	acc.Project.CheckCommand = p
	return nil
}

func isMissing(err error) bool {
	return errors.Is(err, gitsvc.ErrNotFound) || errors.Is(err, gitsvc.ErrNotBlob)
}
