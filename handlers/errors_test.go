package handlers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/changes"
	"atelier/code"
	"atelier/editsession"
	"atelier/fault"
	"atelier/gitsvc"
	"atelier/meter"
	"atelier/models"
	"atelier/projects"
	"atelier/sandbox"
	"atelier/storage/codestore"
	"atelier/terminal"
	"atelier/views"
	"atelier/workbench"
	"atelier/workspace"
)

type problemCase struct {
	name string
	err  error
}

func problemCases(t *testing.T) []problemCase {
	wrap := func(err error) error { return fmt.Errorf("svc: op 7: %w", err) }
	var cs []problemCase
	for _, e := range []error{
		auth.ErrSignInRequired, auth.ErrBadCredentials, auth.ErrCSRF, auth.ErrCrossOrigin, auth.ErrForbidden,
		auth.ErrSiteAdminsOnly, editsession.ErrNotSiteAdmin, meter.ErrBadCap,
		auth.ErrBadUsername, auth.ErrWeakPassword, auth.ErrUserExists,
		auth.ErrDisabled, auth.ErrWrongPassword, auth.ErrPasswordsDiffer, auth.ErrNoSuchUser, auth.ErrLastSiteAdmin,
		auth.ErrOwnAccount, auth.ErrResetLinkInvalid,
		projects.ErrNotFound, projects.ErrBadName, projects.ErrBadMode, projects.ErrPathInMode, projects.ErrArchived,
		projects.ErrLastOwner, projects.ErrUnknownUser, projects.ErrBadRole, projects.ErrBadNetwork,
		projects.ErrNoInvitation, projects.ErrTooManyProjects,
		workspace.ErrNotReady, workspace.ErrOutsideRoot, workspace.ErrNotRegular, workspace.ErrUnsafeRoot,
		codestore.ErrNotFound, codestore.ErrIsDir,
		code.ErrLocalProject, code.ErrNothingToImport, code.ErrNoCanonical,
		gitsvc.ErrNotRepository, gitsvc.ErrNotFound, gitsvc.ErrBusy,
		editsession.ErrNotFound, editsession.ErrFileNotFound, editsession.ErrBinary, editsession.ErrTooLarge,
		editsession.ErrTooManyPaths, editsession.ErrStale, editsession.ErrNoBase, workbench.ErrNoSandbox,
		editsession.ErrEmptyCommand, workbench.ErrSandboxBusy, workbench.ErrSandboxBusyPerson,
		editsession.ErrTooManySessions, editsession.ErrDiskFull,
		meter.ErrCap, sandbox.ErrNetworkUnenforceable, sandbox.ErrNetworkUnavailable, sandbox.ErrUnavailable,
		terminal.ErrAccountShells, terminal.ErrInstanceShells, terminal.ErrInputFull, terminal.ErrInputTooLarge,
		terminal.ErrBadSeq, terminal.ErrBadSize, terminal.ErrBadOffset, terminal.ErrNotFound, terminal.ErrClosed,
		models.ErrNotFound, models.ErrUnavailable,
		changes.ErrNotFound, changes.ErrNothingToSubmit, changes.ErrBadMessage, changes.ErrNotVerified,
		changes.ErrNotWaiting, changes.ErrFinished, changes.ErrNotAuthor, changes.ErrNoRepository,
		changes.ErrBadCheck, changes.ErrOwnChange,
	} {
		cs = append(cs, problemCase{e.Error(), e}, problemCase{"wrapped " + e.Error(), wrap(e)})
	}
	// Errors whose text names what exactly was wrong, made by the code
	// that makes them in the service, or the way it does.
	git, err := gitsvc.New(gitsvc.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, badSource := git.FetchInto(context.Background(), &gitsvc.Repo{GitDir: "/nonexistent"}, "ext::sh -c touch% /tmp/pwned", false)
	_, dashSource := git.FetchInto(context.Background(), &gitsvc.Repo{GitDir: "/nonexistent"}, "-uploadpack=x", false)
	_, internalSource := git.FetchInto(context.Background(), &gitsvc.Repo{GitDir: "/nonexistent"}, "http://127.0.0.1:9/r.git", false)
	_, relLock := git.Lock(context.Background(), "relative.git", false)
	cs = append(cs,
		problemCase{"bad path", workspace.CheckRelPath("a/../b")},
		problemCase{"bad path into .git", workspace.CheckRelPath(".git/config")},
		problemCase{"bad source", badSource},
		problemCase{"bad source dash", dashSource},
		problemCase{"bad argument lock", relLock},
		problemCase{"bad archive plain", badArchive(": upload a .tar.gz or .zip file")},
		problemCase{"bad archive entry", badArchive(": %q: %w", "../evil", workspace.CheckRelPath("../evil"))},
		problemCase{"bad archive link", badArchive(": %q links outside the project (%q)", "l", "../../etc/passwd")},
		problemCase{"bad archive os error", badArchive(": %q: %w", "a/b", &fs.PathError{Op: "open", Path: "/tmp/x/a/b", Err: syscall.ENOTDIR})},
		problemCase{"source failed", sourceFailed("https://example.com/r.git")},
		problemCase{"source not allowed", internalSource},
		problemCase{"root moved", fmt.Errorf("workspace: project %q: %w: %w", "p", workspace.ErrRootMoved, syscall.ENOENT)},
		problemCase{"local not allowed", wrap(&workspace.PathError{Path: "/srv/x", Reason: "local_not_allowed",
			Message: "Only site admins may use this folder.", Hint: "Ask for ATELIER_LOCAL_ROOTS.", Err: workspace.ErrLocalNotAllowed})},
	)

	// Typed errors.
	for _, r := range []string{editsession.ReasonDiscarded, editsession.ReasonIdle, editsession.ReasonMaxAge,
		editsession.ReasonArchived, editsession.ReasonProjectDeleted, editsession.ReasonAdmin, editsession.ReasonRevoked, editsession.ReasonDisabled, "submitted"} {
		cs = append(cs, problemCase{"gone " + r, wrap(&editsession.GoneError{Reason: r})})
	}
	pathErr := &workspace.PathError{Path: "/etc/x", Reason: workspace.ReasonSystem,
		Message: "That is a system folder.", Hint: "Pick a folder of your own."}
	cs = append(cs,
		problemCase{"path error", wrap(pathErr)},
		problemCase{"too many attempts", wrap(&auth.TooManyAttemptsError{Wait: 1500 * time.Millisecond})},
		problemCase{"unsafe root wrapping a path error", fmt.Errorf("workspace: local root of project %q: %w: %w", "p", workspace.ErrUnsafeRoot, pathErr)},
	)

	// Errors of the system rather than of a domain.
	cs = append(cs,
		problemCase{"not exist", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}},
		problemCase{"fs.ErrNotExist", fs.ErrNotExist},
		problemCase{"not a folder", wrap(&fs.PathError{Op: "open", Path: "/x/y", Err: syscall.ENOTDIR})},
		problemCase{"link loop", wrap(&fs.PathError{Op: "open", Path: "/x", Err: syscall.ELOOP})},
		problemCase{"internal", errors.New("db: connection refused")},
		problemCase{"panic", fmt.Errorf("panic: %v", "boom")},
	)

	gitMissing := fmt.Errorf("gitsvc: open %s: %w: %w", "1", gitsvc.ErrNotFound, &fs.PathError{Op: "stat", Path: "/g/1.git/HEAD", Err: syscall.ENOENT})
	// Chains that hold two of them, as the services build them.
	cs = append(cs,
		problemCase{"outside root over os error", fmt.Errorf("workspace: %s %q: %w: %w", "open", "a", workspace.ErrOutsideRoot, &fs.PathError{Op: "openat", Path: "a", Err: syscall.EXDEV})},
		problemCase{"not regular over os error", fmt.Errorf("workspace: %s %q: %w: %w", "open", "a", workspace.ErrNotRegular, errors.New("a pipe"))},
		problemCase{"no canonical over other", fmt.Errorf("%w: %w", code.ErrNoCanonical, errors.New("gitsvc: open 1: x is not a folder"))},
		problemCase{"not repository over git error", fmt.Errorf("gitsvc: %s: %w: %w", "/srv/p", gitsvc.ErrNotRepository, errors.New("git: exit 128"))},
		problemCase{"git not found over git error", fmt.Errorf("gitsvc: list %q: %w: %w", "d", gitsvc.ErrNotFound, errors.New("git: exit 128"))},
		problemCase{"network over init error", fmt.Errorf("%w: %w", sandbox.ErrNetworkUnenforceable, errors.New("netns: operation not permitted"))},
		problemCase{"git not found over missing file", gitMissing},
		problemCase{"no canonical over missing repository", fmt.Errorf("%w: %w", code.ErrNoCanonical, gitMissing)},
		problemCase{"no route", errNoRoute},
		problemCase{"stale base", fmt.Errorf("svc: %w", &changes.StaleBaseError{Paths: []string{"src/a.go", "README.md"}})},
		problemCase{"bad upload", errBadUpload},
		problemCase{"upload too large", tooLarge(64 << 20)},
		problemCase{"busy", fmt.Errorf("gitsvc: %s lock on %s not free within %s: %w", "write", "/g", "30s", gitsvc.ErrBusy)},
	)
	return cs
}

// badArchive and sourceFailed build the errors code's archive reader and
// importer return, with the same words.
func badArchive(format string, args ...any) error {
	return fault.Detailf(code.ErrBadArchive, format, args...)
}

func sourceFailed(source string) error {
	return fault.Detailf(code.ErrSourceFailed, ": %s", source)
}

// TestProblemOf pins what a client sees for every error the domain packages
// declare, wrapped as the services wrap them. The answers were taken from the
// table in views before the errors said their own kind, and must not move.
// A stale_base refusal carries exactly the paths canonical changed, for
// the client to show and to act on.
func TestStaleBaseCarriesPaths(t *testing.T) {
	p := ProblemOf(fmt.Errorf("svc: %w", &changes.StaleBaseError{Paths: []string{"src/a.go", "README.md"}}))
	if p.Status != 409 || p.Reason != "stale_base" || len(p.Paths) != 2 || p.Paths[0] != "src/a.go" || p.Paths[1] != "README.md" {
		t.Fatalf("problem %+v", p)
	}
	if p := ProblemOf(changes.ErrNotVerified); p.Paths != nil {
		t.Fatalf("a problem without paths got %v", p.Paths)
	}
}

func TestProblemOf(t *testing.T) {
	for _, c := range problemCases(t) {
		w, ok := wantProblems[c.name]
		if !ok {
			t.Errorf("%s: no expectation", c.name)
			continue
		}
		p := ProblemOf(c.err)
		got := wantProblem{p.Status, p.Reason, p.Message, p.Hint}
		if got != w {
			t.Errorf("%s:\n got %#v\nwant %#v", c.name, got, w)
		}
	}
}

// Every kind of error is answered with an error status: a kind added
// without one would reach the client as status 0.
func TestEveryKindHasAStatus(t *testing.T) {
	for k := fault.Internal; k <= fault.Full; k++ {
		if st := statusOf[k]; st < 400 || st > 599 {
			t.Errorf("kind %d is answered with %d", k, st)
		}
	}
	if statusOf[fault.Full] != http.StatusInsufficientStorage {
		t.Errorf("no room left is %d, want 507", statusOf[fault.Full])
	}
}

// A refusal that knows when to try again says so in Retry-After, in whole
// seconds rounded up; other errors carry no Retry-After.
func TestRenderErrorRetryAfter(t *testing.T) {
	render, err := views.NewRenderer(Chrome)
	if err != nil {
		t.Fatal(err)
	}
	a := Adapter{Render: render, Log: slog.New(slog.DiscardHandler)}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("svc: %w", &auth.TooManyAttemptsError{Wait: 1500 * time.Millisecond}), "2"},
		{&auth.TooManyAttemptsError{Wait: 15 * time.Minute}, "900"},
		{auth.ErrBadCredentials, ""},
		{fault.WithRetryAfter(code.ErrTooManyImports, time.Hour), "3600"},
		{fault.WithRetryAfter(errors.New("not described"), time.Second), ""},
	} {
		w := httptest.NewRecorder()
		ctx, _ := gin.CreateTestContext(w)
		ctx.Request = httptest.NewRequest(http.MethodPost, "/login", nil)
		ctx.Request.Header.Set("Accept", "application/json")
		a.RenderError(ctx, c.err)
		if got := w.Header().Get("Retry-After"); got != c.want {
			t.Errorf("%v: Retry-After %q, want %q", c.err, got, c.want)
		}
	}
}

type wantProblem struct {
	status                int
	reason, message, hint string
}

var wantProblems = map[string]wantProblem{
	"stale base":                                                                  {409, "stale_base", "Canonical changed files you edited since your session began.", "Rebase the session onto the current canonical: the edits of other files come along, these you make again."},
	"changes: no such change":                                                     {404, "not_found", "There is no such change.", ""},
	"wrapped changes: no such change":                                             {404, "not_found", "There is no such change.", ""},
	"changes: the session changes no file":                                        {409, "nothing_to_submit", "The session changes no file; edit something first.", ""},
	"wrapped changes: the session changes no file":                                {409, "nothing_to_submit", "The session changes no file; edit something first.", ""},
	"changes: a message has at most 10000 characters":                             {400, "bad_message", "A message has at most 10000 characters.", ""},
	"wrapped changes: a message has at most 10000 characters":                     {400, "bad_message", "A message has at most 10000 characters.", ""},
	"changes: only a verified change is released":                                 {409, "not_verified", "Only a verified change is released.", ""},
	"wrapped changes: only a verified change is released":                         {409, "not_verified", "Only a verified change is released.", ""},
	"changes: the change does not wait for an approval":                           {409, "not_waiting", "The change does not wait for an approval.", ""},
	"wrapped changes: the change does not wait for an approval":                   {409, "not_waiting", "The change does not wait for an approval.", ""},
	"changes: the change is released, withdrawn or superseded":                    {409, "finished", "The change is released, withdrawn or superseded.", ""},
	"wrapped changes: the change is released, withdrawn or superseded":            {409, "finished", "The change is released, withdrawn or superseded.", ""},
	"changes: only its author withdraws a change":                                 {403, "not_author", "Only its author withdraws a change.", ""},
	"wrapped changes: only its author withdraws a change":                         {403, "not_author", "Only its author withdraws a change.", ""},
	"changes: the project's folder is not a git repository with a commit":         {409, "no_base", "The project's folder is not a git repository with a commit.", ""},
	"wrapped changes: the project's folder is not a git repository with a commit": {409, "no_base", "The project's folder is not a git repository with a commit.", ""},
	"changes: a check command has 1 to 1000 characters on one line":               {400, "bad_check_command", "A check command has 1 to 1000 characters on one line.", ""},
	"wrapped changes: a check command has 1 to 1000 characters on one line":       {400, "bad_check_command", "A check command has 1 to 1000 characters on one line.", ""},
	"models: the database is unavailable":                                         {503, "database_unavailable", "The database does not answer right now; try again in a moment.", ""},
	"wrapped models: the database is unavailable":                                 {503, "database_unavailable", "The database does not answer right now; try again in a moment.", ""},
	"sandbox: this host cannot build the sandbox's jail":                          {503, "sandbox_unavailable", "This server's host lacks a kernel feature the sandbox needs, so commands and terminals are off; the server's log at start says which.", ""},
	"wrapped sandbox: this host cannot build the sandbox's jail":                  {503, "sandbox_unavailable", "This server's host lacks a kernel feature the sandbox needs, so commands and terminals are off; the server's log at start says which.", ""},
	"sandbox: network allow is unavailable here":                                  {503, "network_unavailable", "The server cannot give this project's sandbox the internet without the host here (slirp4netns and /dev/net/tun are needed), so it does not run commands with the network allowed; the log at start says what is missing, and an administrator can install it or deny the network for the project.", ""},
	"wrapped sandbox: network allow is unavailable here":                          {503, "network_unavailable", "The server cannot give this project's sandbox the internet without the host here (slirp4netns and /dev/net/tun are needed), so it does not run commands with the network allowed; the log at start says what is missing, and an administrator can install it or deny the network for the project.", ""},
	"source not allowed":                                                          {403, "source_not_allowed", "Source not allowed: http://127.0.0.1:9/r.git: its host is a loopback address, which imports may not reach.", ""},
	"root moved":                                                                  {409, "root_moved", "This project's folder is no longer the one it was created with: it was moved or replaced, or a folder above it changed hands, so nothing is read from it. Put the folder back, or create the project again.", ""},
	"local not allowed":                                                           {403, "local_not_allowed", "Only site admins may use this folder.", "Ask for ATELIER_LOCAL_ROOTS."},
	// The views table let fs.ErrNotExist win over the domain errors listed
	// after it, so a canonical repository missing from the disk answered
	// 404 "No such file or folder." through gitsvc.ErrNotFound and even
	// through code.ErrNoCanonical. The outermost domain error now decides.
	"git not found over missing file":      {404, "not_found", "Not found.", ""},
	"no canonical over missing repository": {409, "no_canonical", "The project has no canonical repository.", ""},

	"no route":                                                    {404, "not_found", "Not found.", ""},
	"bad upload":                                                  {400, "bad_upload", "The upload could not be read.", ""},
	"upload too large":                                            {413, "too_large", "The archive is larger than 64 MiB.", ""},
	"auth: sign in required":                                      {401, "sign_in_required", "Please sign in.", ""},
	"wrapped auth: sign in required":                              {401, "sign_in_required", "Please sign in.", ""},
	"too many attempts":                                           {429, "too_many_attempts", "Too many failed sign-ins; try again in 2 seconds.", ""},
	"auth: wrong username or password":                            {401, "bad_credentials", "Wrong username or password.", ""},
	"wrapped auth: wrong username or password":                    {401, "bad_credentials", "Wrong username or password.", ""},
	"auth: missing or wrong CSRF token":                           {403, "csrf", "The form is out of date or was not sent by Atelier; reload the page and try again.", ""},
	"wrapped auth: missing or wrong CSRF token":                   {403, "csrf", "The form is out of date or was not sent by Atelier; reload the page and try again.", ""},
	"auth: your role in this project does not allow that":         {403, "forbidden", "Your role in this project does not allow that.", ""},
	"wrapped auth: your role in this project does not allow that": {403, "forbidden", "Your role in this project does not allow that.", ""},
	"auth: a request from another origin":                         {403, "cross_origin", "The request came from another site; Atelier takes changes only from its own pages.", ""},
	"wrapped auth: a request from another origin":                 {403, "cross_origin", "The request came from another site; Atelier takes changes only from its own pages.", ""},

	// The admin dashboard's refusals.
	"auth: site admins only (answered as not found)":               {404, "not_found", "Not found.", ""},
	"wrapped auth: site admins only (answered as not found)":       {404, "not_found", "Not found.", ""},
	"editsession: only site admins may do this":                    {404, "not_found", "Not found.", ""},
	"wrapped editsession: only site admins may do this":            {404, "not_found", "Not found.", ""},
	"meter: a cap is a whole number of seconds, 0 or more":         {400, "bad_cap", "A cap is a whole number of seconds, 0 or more; leave it empty for the default.", ""},
	"wrapped meter: a cap is a whole number of seconds, 0 or more": {400, "bad_cap", "A cap is a whole number of seconds, 0 or more; leave it empty for the default.", ""},
	"gone admin": {410, "admin", "The session has ended: a site admin ended it.", ""},

	// Ownership, the bound on projects and approvals.
	"projects: no such invitation":                                              {404, "no_invitation", "There is no such invitation; it may have been withdrawn.", ""},
	"wrapped projects: no such invitation":                                      {404, "no_invitation", "There is no such invitation; it may have been withdrawn.", ""},
	"projects: you created as many projects as a person may":                    {403, "too_many_projects", "You have created as many projects as a person may; delete one first.", ""},
	"wrapped projects: you created as many projects as a person may":            {403, "too_many_projects", "You have created as many projects as a person may; delete one first.", ""},
	"changes: another owner or admin approves a change, not its author":         {403, "own_change", "Another owner or admin approves this change, not its author.", ""},
	"wrapped changes: another owner or admin approves a change, not its author": {403, "own_change", "Another owner or admin approves this change, not its author.", ""},
	"gone revoked": {410, "revoked", "The session has ended: you may no longer edit the project.", ""},

	// People.
	"auth: the account is disabled":                                 {403, "account_disabled", "This account is disabled; a site admin can enable it again.", ""},
	"wrapped auth: the account is disabled":                         {403, "account_disabled", "This account is disabled; a site admin can enable it again.", ""},
	"auth: the current password is wrong":                           {403, "wrong_password", "The current password is wrong.", ""},
	"wrapped auth: the current password is wrong":                   {403, "wrong_password", "The current password is wrong.", ""},
	"auth: the new password and its repetition differ":              {400, "passwords_differ", "The new password and its repetition differ.", ""},
	"wrapped auth: the new password and its repetition differ":      {400, "passwords_differ", "The new password and its repetition differ.", ""},
	"auth: no user with that name":                                  {404, "no_such_user", "No user with that name.", ""},
	"wrapped auth: no user with that name":                          {404, "no_such_user", "No user with that name.", ""},
	"auth: the last site admin who can sign in stays one":           {409, "last_site_admin", "Atelier keeps at least one site admin who can sign in: make someone else a site admin first.", ""},
	"wrapped auth: the last site admin who can sign in stays one":   {409, "last_site_admin", "Atelier keeps at least one site admin who can sign in: make someone else a site admin first.", ""},
	"auth: a site admin does not disable their own account":         {409, "own_account", "You cannot disable your own account.", ""},
	"wrapped auth: a site admin does not disable their own account": {409, "own_account", "You cannot disable your own account.", ""},
	"auth: unknown, used or expired reset link":                     {410, "reset_link_invalid", "This link no longer works: it was used, has expired or was replaced by a newer one. Ask a site admin for a new one.", ""},
	"wrapped auth: unknown, used or expired reset link":             {410, "reset_link_invalid", "This link no longer works: it was used, has expired or was replaced by a newer one. Ask a site admin for a new one.", ""},
	"gone disabled": {410, "disabled", "The session has ended: your account was disabled.", ""},

	"auth: a username is 1-32 of a-z 0-9 _ . - and starts with a letter or digit":                                  {400, "bad_username", "A username is 1-32 of a-z 0-9 _ . - and starts with a letter or digit.", ""},
	"wrapped auth: a username is 1-32 of a-z 0-9 _ . - and starts with a letter or digit":                          {400, "bad_username", "A username is 1-32 of a-z 0-9 _ . - and starts with a letter or digit.", ""},
	"auth: a password has at least 8 characters":                                                                   {400, "weak_password", "A password has at least 8 characters.", ""},
	"wrapped auth: a password has at least 8 characters":                                                           {400, "weak_password", "A password has at least 8 characters.", ""},
	"auth: that username is taken":                                                                                 {409, "user_exists", "That username is taken.", ""},
	"wrapped auth: that username is taken":                                                                         {409, "user_exists", "That username is taken.", ""},
	"projects: no such project":                                                                                    {404, "not_found", "There is no such project, or you are not a member of it.", ""},
	"wrapped projects: no such project":                                                                            {404, "not_found", "There is no such project, or you are not a member of it.", ""},
	"projects: a project name has 1 to 100 characters and no control characters":                                   {400, "bad_name", "A project name has 1 to 100 characters and no control characters.", ""},
	"wrapped projects: a project name has 1 to 100 characters and no control characters":                           {400, "bad_name", "A project name has 1 to 100 characters and no control characters.", ""},
	"projects: mode is container or local":                                                                         {400, "bad_mode", "Mode is container or local.", ""},
	"wrapped projects: mode is container or local":                                                                 {400, "bad_mode", "Mode is container or local.", ""},
	"projects: a container project takes no path":                                                                  {400, "path_not_allowed", "A container project takes no path.", ""},
	"wrapped projects: a container project takes no path":                                                          {400, "path_not_allowed", "A container project takes no path.", ""},
	"projects: the project is archived":                                                                            {409, "archived", "The project is archived.", ""},
	"wrapped projects: the project is archived":                                                                    {409, "archived", "The project is archived.", ""},
	"projects: a project keeps at least one owner":                                                                 {409, "last_owner", "A project keeps at least one owner.", ""},
	"wrapped projects: a project keeps at least one owner":                                                         {409, "last_owner", "A project keeps at least one owner.", ""},
	"projects: no user with that name":                                                                             {400, "unknown_user", "No user with that name.", ""},
	"wrapped projects: no user with that name":                                                                     {400, "unknown_user", "No user with that name.", ""},
	"projects: role is owner, admin or member":                                                                     {400, "bad_role", "Role is owner, admin or member.", ""},
	"wrapped projects: role is owner, admin or member":                                                             {400, "bad_role", "Role is owner, admin or member.", ""},
	"projects: the sandbox network is deny or allow":                                                               {400, "bad_network", "The sandbox network is deny or allow.", ""},
	"wrapped projects: the sandbox network is deny or allow":                                                       {400, "bad_network", "The sandbox network is deny or allow.", ""},
	"workspace: container workspace not ready":                                                                     {409, "workspace_not_ready", "Container workspace not ready.", ""},
	"wrapped workspace: container workspace not ready":                                                             {409, "workspace_not_ready", "Container workspace not ready.", ""},
	"workspace: path leads outside the project folder":                                                             {403, "outside_root", "That path leads outside the project's folder.", ""},
	"wrapped workspace: path leads outside the project folder":                                                     {403, "outside_root", "That path leads outside the project's folder.", ""},
	"workspace: not a regular file":                                                                                {415, "not_regular_file", "That is a device, a pipe or a socket, not a file.", ""},
	"wrapped workspace: not a regular file":                                                                        {415, "not_regular_file", "That is a device, a pipe or a socket, not a file.", ""},
	"workspace: unsafe project root":                                                                               {500, "unsafe_root", "This project's folder fails the safety checks; an administrator must fix it.", ""},
	"wrapped workspace: unsafe project root":                                                                       {500, "unsafe_root", "This project's folder fails the safety checks; an administrator must fix it.", ""},
	"codestore: no such file or folder":                                                                            {404, "not_found", "No such file or folder.", ""},
	"wrapped codestore: no such file or folder":                                                                    {404, "not_found", "No such file or folder.", ""},
	"codestore: that is a folder":                                                                                  {400, "is_dir", "That is a folder.", ""},
	"wrapped codestore: that is a folder":                                                                          {400, "is_dir", "That is a folder.", ""},
	"code: a Local project's code is its folder; import into it with your own tools":                               {409, "local_project", "A Local project's code is its folder; import into it with your own tools.", ""},
	"wrapped code: a Local project's code is its folder; import into it with your own tools":                       {409, "local_project", "A Local project's code is its folder; import into it with your own tools.", ""},
	"code: send an archive (.tar.gz or .zip) or a git source to import":                                            {400, "nothing_to_import", "Send an archive (.tar.gz or .zip) or a git source to import.", ""},
	"wrapped code: send an archive (.tar.gz or .zip) or a git source to import":                                    {400, "nothing_to_import", "Send an archive (.tar.gz or .zip) or a git source to import.", ""},
	"code: the project has no canonical repository":                                                                {409, "no_canonical", "The project has no canonical repository.", ""},
	"wrapped code: the project has no canonical repository":                                                        {409, "no_canonical", "The project has no canonical repository.", ""},
	"gitsvc: not a git repository":                                                                                 {400, "not_a_repository", "The source is not a git repository.", ""},
	"wrapped gitsvc: not a git repository":                                                                         {400, "not_a_repository", "The source is not a git repository.", ""},
	"gitsvc: not found":                                                                                            {404, "not_found", "Not found.", ""},
	"wrapped gitsvc: not found":                                                                                    {404, "not_found", "Not found.", ""},
	"gitsvc: repository busy":                                                                                      {503, "repository_busy", "The repository is busy; try again in a moment.", ""},
	"wrapped gitsvc: repository busy":                                                                              {503, "repository_busy", "The repository is busy; try again in a moment.", ""},
	"workbench: the server runs as many commands as it may at once":                                                {429, "sandbox_busy", "The server runs as many commands as it may at once; try again in a few seconds.", ""},
	"wrapped workbench: the server runs as many commands as it may at once":                                        {429, "sandbox_busy", "The server runs as many commands as it may at once; try again in a few seconds.", ""},
	"workbench: the person runs as many commands at once as one person may":                                        {429, "sandbox_busy_person", "You already run as many commands at once as one person may on this server.", ""},
	"editsession: the person holds as many open sessions as one may":                                               {429, "too_many_sessions", "You have as many edit sessions open as one person may.", ""},
	"wrapped editsession: the person holds as many open sessions as one may":                                       {429, "too_many_sessions", "You have as many edit sessions open as one person may.", ""},
	"editsession: another session's disk would pass the sessions' total":                                           {507, "sandbox_disk_full", "The server has no room for another edit session's disk.", ""},
	"wrapped editsession: another session's disk would pass the sessions' total":                                   {507, "sandbox_disk_full", "The server has no room for another edit session's disk.", ""},
	"wrapped workbench: the person runs as many commands at once as one person may":                                {429, "sandbox_busy_person", "You already run as many commands at once as one person may on this server.", ""},
	"editsession: no such session":                                                                                 {404, "not_found", "There is no such session.", ""},
	"wrapped editsession: no such session":                                                                         {404, "not_found", "There is no such session.", ""},
	"editsession: no such file":                                                                                    {404, "not_found", "No such file.", ""},
	"wrapped editsession: no such file":                                                                            {404, "not_found", "No such file.", ""},
	"editsession: only text files can be edited (this one has a NUL byte)":                                         {415, "binary", "Only text files can be edited (this one has a NUL byte).", ""},
	"wrapped editsession: only text files can be edited (this one has a NUL byte)":                                 {415, "binary", "Only text files can be edited (this one has a NUL byte).", ""},
	"editsession: a file is at most 262144 bytes":                                                                  {413, "too_large", "A file is at most 262144 bytes.", ""},
	"wrapped editsession: a file is at most 262144 bytes":                                                          {413, "too_large", "A file is at most 262144 bytes.", ""},
	"editsession: a session changes at most 200 paths":                                                             {409, "too_many_paths", "A session changes at most 200 paths.", ""},
	"wrapped editsession: a session changes at most 200 paths":                                                     {409, "too_many_paths", "A session changes at most 200 paths.", ""},
	"editsession: the file changed since you loaded it (another tab?)":                                             {412, "stale", "The file changed since you loaded it (another tab?).", ""},
	"wrapped editsession: the file changed since you loaded it (another tab?)":                                     {412, "stale", "The file changed since you loaded it (another tab?).", ""},
	"editsession: the project's folder is not a git repository with a commit, so there is nothing to fork":         {409, "no_base", "The project's folder is not a git repository with a commit, so there is nothing to fork.", ""},
	"wrapped editsession: the project's folder is not a git repository with a commit, so there is nothing to fork": {409, "no_base", "The project's folder is not a git repository with a commit, so there is nothing to fork.", ""},
	"workbench: this session has no sandbox user; discard it and open a new one":                                   {409, "no_sandbox", "This session has no sandbox user; discard it and open a new one.", ""},
	"wrapped workbench: this session has no sandbox user; discard it and open a new one":                           {409, "no_sandbox", "This session has no sandbox user; discard it and open a new one.", ""},
	"editsession: type a command to run":                                                                           {400, "empty_command", "Type a command to run.", ""},
	"wrapped editsession: type a command to run":                                                                   {400, "empty_command", "Type a command to run.", ""},
	"meter: monthly sandbox cap reached":                                                                           {429, "sandbox_cap", "The project has used its sandbox time for this month; editing still works, commands are off until next month.", ""},
	"wrapped meter: monthly sandbox cap reached":                                                                   {429, "sandbox_cap", "The project has used its sandbox time for this month; editing still works, commands are off until next month.", ""},
	"sandbox: network deny cannot be enforced here":                                                                {503, "network_unenforceable", "The server cannot cut this project's sandbox off the network here, so it does not run commands; an administrator can allow the network for the project or give the server CAP_SYS_ADMIN.", ""},
	"wrapped sandbox: network deny cannot be enforced here":                                                        {503, "network_unenforceable", "The server cannot cut this project's sandbox off the network here, so it does not run commands; an administrator can allow the network for the project or give the server CAP_SYS_ADMIN.", ""},
	"terminal: you have as many shells open as an account may; close one first":                                    {429, "account_shells", "You have as many shells open as an account may; close one first.", ""},
	"wrapped terminal: you have as many shells open as an account may; close one first":                            {429, "account_shells", "You have as many shells open as an account may; close one first.", ""},
	"terminal: the server runs as many shells as it allows; try again later":                                       {429, "instance_shells", "The server runs as many shells as it allows; try again later.", ""},
	"wrapped terminal: the server runs as many shells as it allows; try again later":                               {429, "instance_shells", "The server runs as many shells as it allows; try again later.", ""},
	"terminal: too much input is waiting for the shell; try again in a moment":                                     {429, "input_full", "Too much input is waiting for the shell; try again in a moment.", ""},
	"wrapped terminal: too much input is waiting for the shell; try again in a moment":                             {429, "input_full", "Too much input is waiting for the shell; try again in a moment.", ""},
	"terminal: that input is larger than the whole input queue":                                                    {413, "too_large", "That input is larger than the whole input queue.", ""},
	"wrapped terminal: that input is larger than the whole input queue":                                            {413, "too_large", "That input is larger than the whole input queue.", ""},
	"terminal: an input sequence number is a whole number from 1":                                                  {400, "bad_seq", "An input sequence number is a whole number from 1.", ""},
	"wrapped terminal: an input sequence number is a whole number from 1":                                          {400, "bad_seq", "An input sequence number is a whole number from 1.", ""},
	"terminal: columns and rows are whole numbers from 1 to 1000":                                                  {400, "bad_size", "Columns and rows are whole numbers from 1 to 1000.", ""},
	"wrapped terminal: columns and rows are whole numbers from 1 to 1000":                                          {400, "bad_size", "Columns and rows are whole numbers from 1 to 1000.", ""},
	"terminal: that resume offset is not a byte offset of this terminal's output":                                  {400, "bad_offset", "That resume offset is not a byte offset of this terminal's output.", ""},
	"wrapped terminal: that resume offset is not a byte offset of this terminal's output":                          {400, "bad_offset", "That resume offset is not a byte offset of this terminal's output.", ""},
	"terminal: no such terminal":                                                                                   {404, "not_found", "There is no such terminal.", ""},
	"wrapped terminal: no such terminal":                                                                           {404, "not_found", "There is no such terminal.", ""},
	"terminal: the terminal has ended":                                                                             {410, "terminal_ended", "The terminal has ended.", ""},
	"wrapped terminal: the terminal has ended":                                                                     {410, "terminal_ended", "The terminal has ended.", ""},
	"models: not found":                 {404, "not_found", "Not found.", ""},
	"wrapped models: not found":         {404, "not_found", "Not found.", ""},
	"bad path":                          {400, "bad_path", "Bad path \"a/../b\": the path has a .. component.", ""},
	"bad path into .git":                {400, "bad_path", "Bad path \".git/config\": the path goes into the .git folder.", ""},
	"bad source":                        {400, "bad_source", "Bad argument: source \"ext::sh -c touch% /tmp/pwned\": remote helpers are not allowed.", ""},
	"bad source dash":                   {400, "bad_source", "Bad argument: \"-uploadpack=x\" starts with '-'.", ""},
	"bad argument lock":                 {400, "bad_source", "Bad argument: git dir \"relative.git\" is not absolute.", ""},
	"bad archive plain":                 {400, "bad_archive", "Bad archive: upload a .tar.gz or .zip file.", ""},
	"bad archive entry":                 {400, "bad_archive", "Bad archive: \"../evil\": bad path \"../evil\": the path has a .. component.", ""},
	"bad archive link":                  {400, "bad_archive", "Bad archive: \"l\" links outside the project (\"../../etc/passwd\").", ""},
	"bad archive os error":              {400, "bad_archive", "Bad archive: \"a/b\": open /tmp/x/a/b: not a directory.", ""},
	"source failed":                     {502, "source_failed", "The git source could not be fetched: https://example.com/r.git.", ""},
	"gone discarded":                    {410, "discarded", "The session has ended: it was discarded.", ""},
	"gone idle":                         {410, "idle", "The session has ended: nothing happened in it for too long.", ""},
	"gone max_age":                      {410, "max_age", "The session has ended: it reached its maximum age.", ""},
	"gone archived":                     {410, "archived", "The session has ended: the project was archived.", ""},
	"gone project_deleted":              {410, "project_deleted", "The session has ended: the project was deleted.", ""},
	"gone submitted":                    {410, "submitted", "The session has ended: it was submitted.", ""},
	"path error":                        {400, "path_system", "That is a system folder.", "Pick a folder of your own."},
	"unsafe root wrapping a path error": {500, "unsafe_root", "This project's folder fails the safety checks; an administrator must fix it.", ""},
	"not exist":                         {404, "not_found", "No such file or folder.", ""},
	"fs.ErrNotExist":                    {404, "not_found", "No such file or folder.", ""},
	"not a folder":                      {404, "not_found", "No such folder.", ""},
	"link loop":                         {400, "link_loop", "The path goes round a loop of symbolic links.", ""},
	"internal":                          {500, "internal", "Something went wrong on our side.", ""},
	"panic":                             {500, "internal", "Something went wrong on our side.", ""},
	"outside root over os error":        {403, "outside_root", "That path leads outside the project's folder.", ""},
	"not regular over os error":         {415, "not_regular_file", "That is a device, a pipe or a socket, not a file.", ""},
	"no canonical over other":           {409, "no_canonical", "The project has no canonical repository.", ""},
	"not repository over git error":     {400, "not_a_repository", "The source is not a git repository.", ""},
	"git not found over git error":      {404, "not_found", "Not found.", ""},
	"network over init error":           {503, "network_unenforceable", "The server cannot cut this project's sandbox off the network here, so it does not run commands; an administrator can allow the network for the project or give the server CAP_SYS_ADMIN.", ""},
	"busy":                              {503, "repository_busy", "The repository is busy; try again in a moment.", ""},
}
