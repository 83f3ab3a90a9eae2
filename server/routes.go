package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/events"
	"atelier/handlers"
	"atelier/static"
)

// routes registers every URL of Atelier; the whole surface reads top to
// bottom here.
func (a *App) routes() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.ContextWithFallback = true
	// A URL one slash off a route is not sent to the route: the redirect
	// would tell that the route exists, /admin's included.
	r.RedirectTrailingSlash = false
	// The largest body limitBody lets any route but the import take: no
	// part of a form gin parses can pass it and spill to a temporary
	// file. An import never has gin parse its upload; it streams it
	// (handlers.Code.Import).
	r.MaxMultipartMemory = max(maxFormBytes, int64(a.inputBytes))
	// The client's address (sign-in throttling) is the connection's, or the
	// X-Forwarded-For entry added by a proxy the operator trusts; gin would
	// otherwise believe the header from anyone.
	r.RemoteIPHeaders = []string{"X-Forwarded-For"}
	if err := r.SetTrustedProxies(a.trustedProxies); err != nil {
		panic(err) // the prefixes were parsed by LoadConfig
	}
	r.Use(a.observeRequests, a.recover, a.logRequests, securityHeaders, a.limitBody)
	h := a.adapter.Handle

	r.GET("/healthz", a.health.Show)
	r.GET("/metrics", h(a.scrape.Scrape)) // a scraper's bearer token or a site admin's sign-in
	r.StaticFS("/static", http.FS(static.FS))
	// Browsers ask every site for /favicon.ico.
	r.StaticFileFS("/favicon.ico", "favicon.ico", http.FS(static.FS))
	r.GET("/highlight.css", a.code.HighlightCSS)

	// Who calls is checked before their token, and both before anything
	// of a body is read: the sign-in first, then CSRF, then (in the
	// handlers) membership and permission.
	identify := h(a.Auth.Identify(a.cookies))
	site := r.Group("/", identify)
	site.GET("/", func(c *gin.Context) { c.Redirect(http.StatusSeeOther, "/projects") })
	site.GET("/login", h(a.signIn.ShowLogin))
	site.POST("/login", h(auth.CheckCSRF), h(a.signIn.Login))
	site.POST("/logout", h(auth.CheckCSRF), h(a.signIn.Logout))
	// A site admin's reset link: whoever holds it sets the password once,
	// signed in or not.
	site.GET("/password-reset", h(a.account.ShowReset))
	site.POST("/password-reset", h(auth.CheckCSRF), h(a.account.Reset))

	in := site.Group("/", h(auth.RequireUser), h(auth.CheckCSRF))
	if a.localHome != nil {
		in.Use(h(a.localHome.Handle))
	}
	in.GET("/account", h(a.account.Show))
	in.POST("/account/password", h(a.account.ChangePassword))
	in.GET("/projects", h(a.projects.List))
	in.GET("/projects/new", h(a.projects.New))
	in.POST("/projects", h(a.projects.Create))
	in.POST("/projects/validate-path", h(a.projects.ValidatePath))
	in.GET("/projects/:id", h(a.projects.Show))
	in.POST("/projects/:id/archive", h(a.projects.Archive))
	in.POST("/projects/:id/unarchive", h(a.projects.Unarchive))
	in.POST("/projects/:id/leave", h(a.projects.Leave))
	in.POST("/projects/:id/sandbox-network", h(a.projects.SetNetwork))
	in.DELETE("/projects/:id", h(a.projects.Delete))
	in.POST("/projects/:id/members", h(a.projects.AddMember))
	in.DELETE("/projects/:id/members/:user", h(a.projects.RemoveMember))
	in.DELETE("/projects/:id/invitations/:user", h(a.projects.WithdrawInvitation))
	in.POST("/projects/:id/invitation/accept", h(a.projects.AcceptInvitation))
	in.POST("/projects/:id/invitation/decline", h(a.projects.DeclineInvitation))
	in.GET("/projects/:id/remotes", h(a.code.Remotes))
	in.POST(importRoute, h(a.code.Import))
	in.GET("/projects/:id/code", h(a.code.Page))
	in.GET("/projects/:id/code/tree", h(a.code.Tree))
	in.GET("/projects/:id/code/file", h(a.code.File))
	in.GET("/projects/:id/code/raw", h(a.code.Raw))
	in.GET("/projects/:id/code/find", h(a.code.Find))
	in.GET("/projects/:id/code/search", h(handlers.HoldStream(a.searches)), h(a.code.Search))
	in.POST("/projects/:id/sessions", h(a.edit.Open))
	session := in.Group(sessionPrefix)
	session.GET("", h(a.edit.Page))
	session.GET("/tree", h(a.edit.Tree))
	session.GET("/find", h(a.edit.Find))
	session.GET("/search", h(handlers.HoldStream(a.searches)), h(a.edit.Search))
	session.GET("/file", h(a.edit.File))
	session.PUT("/file", h(a.edit.Save))
	session.DELETE("/file", h(a.edit.Delete))
	session.POST("/new-file", h(a.edit.NewFile))
	session.POST("/new-folder", h(a.edit.NewFolder))
	session.POST("/rename", h(a.edit.Rename))
	session.POST("/delete-folder", h(a.edit.DeleteFolder))
	session.POST("/revert", h(a.edit.Revert))
	session.GET("/changes", h(a.edit.Changes))
	session.GET("/diff", h(a.edit.Diff))
	session.POST("/discard", h(a.edit.Discard))
	session.POST("/keepalive", h(a.edit.Keepalive))
	// The session's runtime: served by the instance that holds it. Its
	// history too, which waits for what the holder's commands write after
	// their answers.
	toHolder := h(a.edit.ToHolder)
	session.POST("/commands", toHolder, h(a.edit.RunCommand))
	session.GET("/commands", toHolder, h(a.edit.History))
	session.POST("/commands/cancel", toHolder, h(a.edit.CancelCommands))
	session.GET("/commands/current/stream", toHolder, h(handlers.HoldStream(a.openStreams)), h(a.edit.CommandStream))
	session.POST("/terminals", toHolder, h(a.edit.OpenTerminal))
	session.GET("/terminals", toHolder, h(a.edit.Terminals))
	session.GET("/terminals/:tid/stream", toHolder, h(handlers.HoldStream(a.openStreams)), h(a.edit.Stream))
	session.POST(inputRoute, toHolder, h(a.edit.Input))
	session.POST("/terminals/:tid/resize", toHolder, h(a.edit.Resize))
	session.DELETE("/terminals/:tid", toHolder, h(a.edit.CloseTerminal))
	session.GET("/terminals/:tid/shares", toHolder, h(a.edit.Shares))
	session.POST("/terminals/:tid/shares", toHolder, h(a.edit.Share))
	session.DELETE("/terminals/:tid/shares/:uid", toHolder, h(a.edit.Unshare))
	session.POST("/terminals/:tid/recording", toHolder, h(a.edit.StartRecording))
	session.DELETE("/terminals/:tid/recording", toHolder, h(a.edit.StopRecording))
	session.GET("/recordings", h(a.edit.SessionRecordings))
	// A person a shell is shared with watches it, read-only.
	session.GET("/terminals/:tid/watch", h(a.edit.Watch))
	session.GET("/terminals/:tid/watch/stream", h(a.edit.ToWatchHolder), h(handlers.HoldStream(a.openStreams)), h(a.edit.WatchStream))
	// Recordings outlive their sessions: the owner's, and those shared
	// with the project.
	in.GET("/projects/:id/recordings/:rid", h(a.edit.Recording))
	in.GET("/projects/:id/recordings/:rid/cast", h(a.edit.RecordingCast))
	in.POST("/projects/:id/recordings/:rid/share", h(a.edit.ShareRecording))
	in.DELETE("/projects/:id/recordings/:rid", h(a.edit.DeleteRecording))
	session.POST("/submit", h(a.changes.Submit))
	session.POST("/rebase", h(a.changes.Rebase))
	in.GET("/projects/:id/changes", h(a.changes.List))
	in.GET("/projects/:id/changes/:cid", h(a.changes.Show))
	in.GET("/projects/:id/changes/:cid/status", h(a.changes.Status))
	in.POST("/projects/:id/changes/:cid/approve", h(a.changes.Approve))
	in.POST("/projects/:id/changes/:cid/release", h(a.changes.Release))
	in.POST("/projects/:id/changes/:cid/withdraw", h(a.changes.Withdraw))
	in.GET("/projects/:id/events", h(handlers.HoldStream(a.openStreams)), h(a.changes.Stream))
	in.GET("/projects/:id/settings", h(a.changes.Settings))
	in.POST("/projects/:id/settings", h(a.changes.SaveSettings))
	in.POST("/projects/:id/code/edit", h(a.changes.EditFile))

	// Every /admin URL answers anyone but a site admin, signed in or not,
	// as a URL that does not exist, before anything else (the CSRF check
	// included) could tell it apart.
	admin := r.Group("/admin", identify, h(auth.HideFromNonAdmins), h(auth.CheckCSRF))
	admin.GET("/users", h(a.users.List))
	admin.POST("/users", h(a.users.Create))
	admin.POST("/users/:user/reset-password", h(a.users.ResetPassword))
	admin.POST("/users/:user/disable", h(a.users.Disable))
	admin.POST("/users/:user/enable", h(a.users.Enable))
	admin.POST("/users/:user/site-admin", h(a.users.SetSiteAdmin))
	admin.GET("/events", h(handlers.FeedForBrowsers), h(handlers.HoldStream(a.openStreams)), h(func(c *gin.Context) error { return a.Events.ServeStream(c.Writer, c.Request, events.SiteStream) }))
	admin.GET("", h(a.admin.Page))
	admin.GET("/meters", h(a.admin.Meters))
	admin.GET("/meters.csv", h(a.admin.MetersCSV))
	admin.GET("/sessions", h(a.admin.SessionsJSON))
	admin.POST("/sessions/:sid/end", h(a.admin.EndSession))
	admin.GET("/terminals", h(a.admin.Terminals))
	admin.POST("/terminals/:tid/close", h(a.admin.CloseTerminal))
	admin.GET("/stream", h(handlers.HoldStream(a.openStreams)), h(a.admin.Stream))
	admin.POST("/projects/:id/cap", h(a.admin.SetCap))

	// A URL no route serves knows who asks, as the routes do, so its page
	// is the one an /admin URL shows to someone who may not see it.
	r.NoRoute(identify, a.adapter.NotFound)
	r.NoMethod(identify, a.adapter.NotFound)
	return r
}

// maxFormBytes bounds every request body but an import's; no form of
// Atelier comes near it.
const maxFormBytes = 1 << 20

const importRoute = "/projects/:id/import"

// sessionPrefix is the URL of one edit session.
const sessionPrefix = "/projects/:id/sessions/:sid"

// inputRoute takes a terminal's keystrokes; a paste may be as large as the
// terminal's whole input queue.
const inputRoute = "/terminals/:tid/input"

// limitBody bounds the request body before anything reads it, by the
// route the request matched and the kind of body. A urlencoded form, whose
// csrf_token field the CSRF check may read, gets maxFormBytes on every
// route. An import's upload gets the archive's size, and its answer closes
// the connection: a refusal sent before the upload is read then leaves the
// rest of it unread, instead of net/http reading on to find the next
// request.
func (a *App) limitBody(c *gin.Context) {
	limit := int64(maxFormBytes)
	switch route := c.FullPath(); {
	case auth.IsPlainForm(c.Request):
	case route == importRoute:
		limit = a.maxImportBytes + 1<<20 // the archive and the multipart framing
		c.Header("Connection", "close")
	case route == sessionPrefix+inputRoute:
		limit = int64(a.inputBytes)
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
}

// securityHeaders keeps pages in our own origin: no framing, no sniffing, and
// scripts only from /static.
func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
}
