package views

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"syscall"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/code"
	"atelier/editsession"
	"atelier/gitsvc"
	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/sandbox"
	"atelier/storage/codestore"
	"atelier/terminal"
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

// problems maps sentinel errors to what the client sees. The first match
// wins, so an error that wraps another (a bad archive wraps the bad path in
// it) comes before the one it wraps.
var problems = []struct {
	err     error
	status  int
	reason  string
	message string // empty: the error's own text without its package prefix
	detail  bool   // the whole error text names what was wrong, e.g. which path
}{
	{auth.ErrSignInRequired, http.StatusUnauthorized, "sign_in_required", "Please sign in.", false},
	{auth.ErrBadCredentials, http.StatusUnauthorized, "bad_credentials", "Wrong username or password.", false},
	{auth.ErrCSRF, http.StatusForbidden, "csrf", "The form is out of date or was not sent by Atelier; reload the page and try again.", false},
	{auth.ErrForbidden, http.StatusForbidden, "forbidden", "Your role in this project does not allow that.", false},
	{auth.ErrNotSiteAdmin, http.StatusForbidden, "site_admin_only", "Only site admins can do that.", false},
	{auth.ErrBadUsername, http.StatusBadRequest, "bad_username", "", false},
	{auth.ErrWeakPassword, http.StatusBadRequest, "weak_password", "", false},
	{auth.ErrUserExists, http.StatusConflict, "user_exists", "", false},
	{projects.ErrNotFound, http.StatusNotFound, "not_found", "There is no such project, or you are not a member of it.", false},
	{projects.ErrBadName, http.StatusBadRequest, "bad_name", "", false},
	{projects.ErrBadMode, http.StatusBadRequest, "bad_mode", "", false},
	{projects.ErrPathInMode, http.StatusBadRequest, "path_not_allowed", "", false},
	{projects.ErrArchived, http.StatusConflict, "archived", "", false},
	{projects.ErrLastOwner, http.StatusConflict, "last_owner", "", false},
	{projects.ErrUnknownUser, http.StatusBadRequest, "unknown_user", "", false},
	{projects.ErrBadRole, http.StatusBadRequest, "bad_role", "", false},
	{projects.ErrBadNetwork, http.StatusBadRequest, "bad_network", "", false},
	{workspace.ErrNotReady, http.StatusConflict, "workspace_not_ready", "", false},
	{workspace.ErrRootMoved, http.StatusConflict, "root_moved", "This project's folder is no longer the one it was created with: it was moved or replaced, or a folder above it changed hands, so nothing is read from it. Put the folder back, or create the project again.", false},
	{code.ErrBadArchive, http.StatusBadRequest, "bad_archive", "", true},
	{workspace.ErrBadPath, http.StatusBadRequest, "bad_path", "", true},
	{workspace.ErrOutsideRoot, http.StatusForbidden, "outside_root", "That path leads outside the project's folder.", false},
	{workspace.ErrNotRegular, http.StatusUnsupportedMediaType, "not_regular_file", "That is a device, a pipe or a socket, not a file.", false},
	{workspace.ErrUnsafeRoot, http.StatusInternalServerError, "unsafe_root", "This project's folder fails the safety checks; an administrator must fix it.", false},
	{codestore.ErrNotFound, http.StatusNotFound, "not_found", "No such file or folder.", false},
	{codestore.ErrIsDir, http.StatusBadRequest, "is_dir", "", false},
	{fs.ErrNotExist, http.StatusNotFound, "not_found", "No such file or folder.", false},
	{code.ErrLocalProject, http.StatusConflict, "local_project", "", false},
	{code.ErrNothingToImport, http.StatusBadRequest, "nothing_to_import", "", false},
	{code.ErrNoCanonical, http.StatusConflict, "no_canonical", "", false},
	{code.ErrSourceFailed, http.StatusBadGateway, "source_failed", "", true},
	{gitsvc.ErrNotRepository, http.StatusBadRequest, "not_a_repository", "The source is not a git repository.", false},
	{gitsvc.ErrNotFound, http.StatusNotFound, "not_found", "Not found.", false},
	{syscall.ENOTDIR, http.StatusNotFound, "not_found", "No such folder.", false},
	{syscall.ELOOP, http.StatusBadRequest, "link_loop", "The path goes round a loop of symbolic links.", false},
	{gitsvc.ErrSourceNotAllowed, http.StatusForbidden, "source_not_allowed", "", true},
	{gitsvc.ErrBadArgument, http.StatusBadRequest, "bad_source", "", true},
	{gitsvc.ErrBusy, http.StatusServiceUnavailable, "repository_busy", "The repository is busy; try again in a moment.", false},
	{editsession.ErrNotFound, http.StatusNotFound, "not_found", "There is no such session.", false},
	{editsession.ErrFileNotFound, http.StatusNotFound, "not_found", "No such file.", false},
	{editsession.ErrBinary, http.StatusUnsupportedMediaType, "binary", "", false},
	{editsession.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large", "", false},
	{editsession.ErrTooManyPaths, http.StatusConflict, "too_many_paths", "", false},
	{editsession.ErrStale, http.StatusPreconditionFailed, "stale", "", false},
	{editsession.ErrNoBase, http.StatusConflict, "no_base", "", false},
	{editsession.ErrNoSandbox, http.StatusConflict, "no_sandbox", "", false},
	{editsession.ErrEmptyCommand, http.StatusBadRequest, "empty_command", "", false},
	{meter.ErrCap, http.StatusTooManyRequests, "sandbox_cap", "The project has used its sandbox time for this month; editing still works, commands are off until next month.", false},
	{sandbox.ErrUnavailable, http.StatusServiceUnavailable, "sandbox_unavailable", "This server's host lacks a kernel feature the sandbox needs, so commands and terminals are off; the server's log at start says which.", false},
	{sandbox.ErrNetworkUnenforceable, http.StatusServiceUnavailable, "network_unenforceable", "The server cannot cut this project's sandbox off the network here, so it does not run commands; an administrator can allow the network for the project or give the server CAP_SYS_ADMIN.", false},
	{terminal.ErrAccountShells, http.StatusTooManyRequests, "account_shells", "", false},
	{terminal.ErrInstanceShells, http.StatusTooManyRequests, "instance_shells", "", false},
	{terminal.ErrInputFull, http.StatusTooManyRequests, "input_full", "", false},
	{terminal.ErrInputTooLarge, http.StatusRequestEntityTooLarge, "too_large", "", false},
	{terminal.ErrBadSeq, http.StatusBadRequest, "bad_seq", "", false},
	{terminal.ErrBadSize, http.StatusBadRequest, "bad_size", "", false},
	{terminal.ErrBadOffset, http.StatusBadRequest, "bad_offset", "", false},
	{terminal.ErrNotFound, http.StatusNotFound, "not_found", "There is no such terminal.", false},
	{terminal.ErrClosed, http.StatusGone, "terminal_ended", "", false},
	{models.ErrNotFound, http.StatusNotFound, "not_found", "Not found.", false},
}

// ProblemOf turns any error into what the client sees. Unknown errors are
// 500s whose details stay in the log.
func ProblemOf(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var gone *editsession.GoneError
	if errors.As(err, &gone) {
		return &Problem{Status: http.StatusGone, Reason: gone.Reason, Message: sentence(gone.Error())}
	}
	var pe *workspace.PathError
	if errors.As(err, &pe) && !errors.Is(err, workspace.ErrUnsafeRoot) {
		status := http.StatusBadRequest
		if errors.Is(err, workspace.ErrLocalNotAllowed) {
			status = http.StatusForbidden // the folder may be fine; the person may not use it
		}
		return &Problem{Status: status, Reason: pe.Reason, Message: pe.Message, Hint: pe.Hint}
	}
	for _, m := range problems {
		if errors.Is(err, m.err) {
			msg := m.message
			switch {
			case m.detail:
				msg = sentence(err.Error())
			case msg == "":
				msg = sentence(m.err.Error())
			}
			return &Problem{Status: m.status, Reason: m.reason, Message: msg}
		}
	}
	return &Problem{Status: http.StatusInternalServerError, Reason: "internal", Message: "Something went wrong on our side."}
}

// packagePrefix matches the "pkg: " prefixes Atelier's errors carry.
var packagePrefix = regexp.MustCompile(`\b(auth|code|codestore|editsession|events|gitsvc|meter|models|projects|sandbox|storage|terminal|workspace): `)

// sentence drops the package prefixes of an error string and capitalises it.
func sentence(s string) string {
	s = packagePrefix.ReplaceAllString(s, "")
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
		Redirect(c, URL("/login").Query("next", c.Request.URL.RequestURI()).String())
		return
	}
	if rerr := r.Render(c, p.Status, "error", errorView{p}); rerr != nil {
		log.Error("rendering an error page failed", "err", rerr)
		c.String(p.Status, p.Message)
	}
}
