package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	lru "github.com/hashicorp/golang-lru/v2"

	"atelier/models"
	"atelier/projects"
)

// localHome hands every request about a Local project, and every request
// that makes one or checks a folder for one, to the instance whose host
// has their folders (Config.LocalHost), or refuses it when none is named:
// a folder typed on one host means nothing on another. It runs after the
// sign-in and the CSRF check, on instances that do not serve Local
// projects themselves; the instance it hands to checks the request again
// as any other.
type localHome struct {
	elsewhere string // "" when no instance serves Local projects
	forward   *forwarder
	db        *models.Store
	// modes caches projects' workspace modes, which never change.
	modes *lru.Cache[int64, string]
}

// cachedModes is how many projects' modes localHome remembers.
const cachedModes = 4096

func newLocalHome(elsewhere string, forward *forwarder, db *models.Store) *localHome {
	modes, _ := lru.New[int64, string](cachedModes) // fails only for a size below 1
	return &localHome{elsewhere: elsewhere, forward: forward, db: db, modes: modes}
}

func (l *localHome) Handle(c *gin.Context) error {
	local, err := l.aboutLocal(c)
	if err != nil || !local {
		return err
	}
	if l.elsewhere == "" || l.forward == nil || l.forward.Forwarded(c.Request) {
		return projects.ErrLocalUnserved
	}
	l.forward.Forward(c, l.elsewhere)
	c.Abort()
	return nil
}

// aboutLocal reports whether the request is about a Local project: one
// under /projects/:id whose project is Local, a creation whose form asks
// for one (the CSRF check parsed it), or a check of a folder's path.
func (l *localHome) aboutLocal(c *gin.Context) (bool, error) {
	route := c.FullPath()
	switch {
	case route == "/projects/validate-path":
		return true, nil
	case route == "/projects" && c.Request.Method == http.MethodPost:
		// A form the CSRF check did not parse (its token came in a
		// header) is parsed here; the forwarder re-sends it as parsed.
		if c.Request.PostForm == nil {
			if err := c.Request.ParseForm(); err != nil {
				return false, nil // the handler answers the bad form
			}
		}
		return c.Request.PostForm.Get("mode") == models.ModeLocal, nil
	case !strings.HasPrefix(route, "/projects/:id"):
		return false, nil
	}
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return false, nil // the handler answers it as it answers any bad id
	}
	if mode, ok := l.modes.Get(id); ok {
		return mode == models.ModeLocal, nil
	}
	p, err := l.db.ProjectByID(c.Request.Context(), id)
	if errors.Is(err, models.ErrNotFound) {
		return false, nil // and so does it a project that does not exist
	}
	if err != nil {
		return false, err
	}
	l.modes.Add(id, p.WorkspaceMode)
	return p.WorkspaceMode == models.ModeLocal, nil
}
