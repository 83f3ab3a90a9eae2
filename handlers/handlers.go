// Package handlers holds Atelier's thin Gin handlers: each parses the
// request, calls a service and renders. Handlers return errors; Adapt turns
// them into responses through ProblemOf (errors.go).
package handlers

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/fault"
	"atelier/projects"
	"atelier/views"
)

// Func is a handler or middleware that reports failure as an error.
type Func func(*gin.Context) error

// Adapter turns Funcs into Gin handlers that render their errors.
type Adapter struct {
	Render *views.Renderer
	Log    *slog.Logger
}

// Handle adapts fn; on error the chain stops and the error is rendered.
func (a Adapter) Handle(fn Func) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := fn(c); err != nil {
			a.RenderError(c, err)
			c.Abort()
		}
	}
}

// NotFound answers routes that do not exist like missing projects.
func (a Adapter) NotFound(c *gin.Context) {
	a.RenderError(c, errNoRoute)
}

// errNoRoute is a URL no route serves.
var errNoRoute = fault.New(fault.NotFound, "not_found", "handlers: no such route", "Not found.")

// Chrome gives views the signed-in person and the CSRF token every page
// shows. A nil user is returned as a nil interface, so templates test it
// plainly.
func Chrome(c *gin.Context) (user any, csrf string) {
	if u := auth.User(c); u != nil {
		return u, auth.CSRFToken(c)
	}
	return nil, auth.CSRFToken(c)
}

// access authorizes action on the project of the URL's :id.
func access(c *gin.Context, svc *projects.Service, action auth.Action) (*projects.Access, error) {
	id, err := projectID(c)
	if err != nil {
		return nil, err
	}
	return svc.Authorize(c.Request.Context(), auth.User(c), id, action)
}

// projectID reads the :id of a project URL. A malformed id is a project that
// does not exist.
func projectID(c *gin.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, projects.ErrNotFound
	}
	return id, nil
}

// answerMade answers a request that made something at location, or found
// the one an earlier request made: a browser is sent there; a client gets
// body and the Location, with 201 when it is new and 200 when it was found,
// so a retried request can tell the two apart.
func answerMade(c *gin.Context, location string, created bool, body any) error {
	if !views.WantsJSON(c.Request) {
		views.Redirect(c, location)
		return nil
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.Header("Location", location)
	c.JSON(status, body)
	return nil
}
