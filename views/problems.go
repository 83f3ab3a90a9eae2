package views

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/models"
	"atelier/projects"
	"atelier/workspace"
)

// Problem is an error as the client sees it: a status, a machine-readable
// reason, a sentence, and sometimes a hint on how to fix it.
type Problem struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Reason  string `json:"reason"`
	Hint    string `json:"hint,omitempty"`
}

func (p *Problem) Error() string { return p.Message }

// BadRequest is a 400 for input a handler could not parse.
func BadRequest(reason, message string) *Problem {
	return &Problem{Status: http.StatusBadRequest, Reason: reason, Message: message}
}

// problems maps sentinel errors to what the client sees.
var problems = []struct {
	err     error
	status  int
	reason  string
	message string // empty: the error's own text without its package prefix
}{
	{auth.ErrSignInRequired, http.StatusUnauthorized, "sign_in_required", "Please sign in."},
	{auth.ErrBadCredentials, http.StatusUnauthorized, "bad_credentials", "Wrong username or password."},
	{auth.ErrCSRF, http.StatusForbidden, "csrf", "The form is out of date or was not sent by Atelier; reload the page and try again."},
	{auth.ErrForbidden, http.StatusForbidden, "forbidden", "Your role in this project does not allow that."},
	{auth.ErrNotSiteAdmin, http.StatusForbidden, "site_admin_only", "Only site admins can do that."},
	{auth.ErrBadUsername, http.StatusBadRequest, "bad_username", ""},
	{auth.ErrWeakPassword, http.StatusBadRequest, "weak_password", ""},
	{auth.ErrUserExists, http.StatusConflict, "user_exists", ""},
	{projects.ErrNotFound, http.StatusNotFound, "not_found", "There is no such project, or you are not a member of it."},
	{projects.ErrBadName, http.StatusBadRequest, "bad_name", ""},
	{projects.ErrBadMode, http.StatusBadRequest, "bad_mode", ""},
	{projects.ErrPathInMode, http.StatusBadRequest, "path_not_allowed", ""},
	{projects.ErrArchived, http.StatusConflict, "archived", ""},
	{projects.ErrLastOwner, http.StatusConflict, "last_owner", ""},
	{projects.ErrUnknownUser, http.StatusBadRequest, "unknown_user", ""},
	{projects.ErrBadRole, http.StatusBadRequest, "bad_role", ""},
	{workspace.ErrNotReady, http.StatusConflict, "workspace_not_ready", ""},
	{models.ErrNotFound, http.StatusNotFound, "not_found", "Not found."},
}

// ProblemOf turns any error into what the client sees. Unknown errors are
// 500s whose details stay in the log.
func ProblemOf(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var pe *workspace.PathError
	if errors.As(err, &pe) {
		return &Problem{Status: http.StatusBadRequest, Reason: pe.Reason, Message: pe.Message, Hint: pe.Hint}
	}
	for _, m := range problems {
		if errors.Is(err, m.err) {
			msg := m.message
			if msg == "" {
				msg = sentence(m.err.Error())
			}
			return &Problem{Status: m.status, Reason: m.reason, Message: msg}
		}
	}
	return &Problem{Status: http.StatusInternalServerError, Reason: "internal", Message: "Something went wrong on our side."}
}

// sentence drops the "pkg: " prefix of an error string and capitalises it.
func sentence(s string) string {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == ':' && s[i+1] == ' ' {
			s = s[i+2:]
			break
		}
	}
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s + "."
}

// errorView is the error page.
type errorView struct{ *Problem }

func (v errorView) JSON() any { return v.Problem }

// RenderError answers err: JSON {"error", "reason"[, "hint"]} for JSON
// clients, a sign-in redirect for browsers that are not signed in, else the
// error page (its fragment for htmx, which swaps error responses).
func (r *Renderer) RenderError(c *gin.Context, log *slog.Logger, err error) {
	p := ProblemOf(err)
	if p.Status >= 500 {
		log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
	}
	if p.Status == http.StatusUnauthorized && errors.Is(err, auth.ErrSignInRequired) &&
		!WantsJSON(c.Request) && c.Request.Method == http.MethodGet {
		Redirect(c, "/login?next="+url.QueryEscape(c.Request.URL.RequestURI()))
		return
	}
	if rerr := r.Render(c, p.Status, "error", errorView{p}); rerr != nil {
		log.Error("rendering an error page failed", "err", rerr)
		c.String(p.Status, p.Message)
	}
}
