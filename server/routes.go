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
	r.MaxMultipartMemory = 8 << 20 // larger uploads spill to temp files
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
	r.GET("/highlight.css", a.code.HighlightCSS)

	site := r.Group("/", h(a.Auth.Identify(a.cookies)), h(auth.CheckCSRF))
	site.GET("/", func(c *gin.Context) { c.Redirect(http.StatusSeeOther, "/projects") })
	site.GET("/login", h(a.signIn.ShowLogin))
	site.POST("/login", h(a.signIn.Login))
	site.POST("/logout", h(a.signIn.Logout))

	in := site.Group("/", h(auth.RequireUser))
	in.GET("/projects", h(a.projects.List))
	in.GET("/projects/new", h(a.projects.New))
	in.POST("/projects", h(a.projects.Create))
	in.POST("/projects/validate-path", h(a.projects.ValidatePath))
	in.GET("/projects/:id", h(a.projects.Show))
	in.POST("/projects/:id/archive", h(a.projects.Archive))
	in.POST("/projects/:id/sandbox-network", h(a.projects.SetNetwork))
	in.DELETE("/projects/:id", h(a.projects.Delete))
	in.POST("/projects/:id/members", h(a.projects.AddMember))
	in.DELETE("/projects/:id/members/:user", h(a.projects.RemoveMember))
	in.GET("/projects/:id/remotes", h(a.code.Remotes))
	in.POST(importRoute, h(a.code.Import))
	in.GET("/projects/:id/code", h(a.code.Page))
	in.GET("/projects/:id/code/tree", h(a.code.Tree))
	in.GET("/projects/:id/code/file", h(a.code.File))
	in.GET("/projects/:id/code/raw", h(a.code.Raw))
	in.GET("/projects/:id/code/find", h(a.code.Find))
	in.POST("/projects/:id/sessions", h(a.edit.Open))
	session := in.Group(sessionPrefix)
	session.GET("", h(a.edit.Page))
	session.GET("/tree", h(a.edit.Tree))
	session.GET("/find", h(a.edit.Find))
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
	session.POST("/commands", h(a.edit.RunCommand))
	session.GET("/commands", h(a.edit.History))
	session.POST("/commands/cancel", h(a.edit.CancelCommands))
	session.POST("/terminals", h(a.edit.OpenTerminal))
	session.GET("/terminals", h(a.edit.Terminals))
	session.GET("/terminals/:tid/stream", h(handlers.HoldStream(a.streams)), h(a.edit.Stream))
	session.POST(inputRoute, h(a.edit.Input))
	session.POST("/terminals/:tid/resize", h(a.edit.Resize))
	session.DELETE("/terminals/:tid", h(a.edit.CloseTerminal))
	session.POST("/submit", h(a.changes.Submit))
	session.POST("/rebase", h(a.changes.Rebase))
	in.GET("/projects/:id/changes", h(a.changes.List))
	in.GET("/projects/:id/changes/:cid", h(a.changes.Show))
	in.GET("/projects/:id/changes/:cid/status", h(a.changes.Status))
	in.POST("/projects/:id/changes/:cid/approve", h(a.changes.Approve))
	in.POST("/projects/:id/changes/:cid/release", h(a.changes.Release))
	in.POST("/projects/:id/changes/:cid/withdraw", h(a.changes.Withdraw))
	in.GET("/projects/:id/events", h(handlers.HoldStream(a.streams)), h(a.changes.Stream))
	in.GET("/projects/:id/settings", h(a.changes.Settings))
	in.POST("/projects/:id/settings", h(a.changes.SaveSettings))
	in.GET("/projects/:id/code/edit", h(a.changes.EditFilePage))
	in.POST("/projects/:id/code/edit", h(a.changes.EditFile))

	admin := in.Group("/admin", h(auth.RequireSiteAdmin))
	admin.GET("/users", h(a.users.List))
	admin.POST("/users", h(a.users.Create))
	admin.GET("/events", h(handlers.FeedForBrowsers), h(handlers.HoldStream(a.streams)), func(c *gin.Context) { a.Events.ServeStream(c.Writer, c.Request, events.SiteStream) })

	// The dashboard answers anyone but a site admin, signed in or not, as
	// a page that does not exist.
	dash := site.Group("/admin", h(auth.HideFromNonAdmins))
	dash.GET("", h(a.admin.Page))
	dash.GET("/meters", h(a.admin.Meters))
	dash.GET("/meters.csv", h(a.admin.MetersCSV))
	dash.GET("/sessions", h(a.admin.SessionsJSON))
	dash.POST("/sessions/:sid/end", h(a.admin.EndSession))
	dash.GET("/terminals", h(a.admin.Terminals))
	dash.POST("/terminals/:tid/close", h(a.admin.CloseTerminal))
	dash.GET("/stream", h(handlers.HoldStream(a.streams)), h(a.admin.Stream))
	dash.POST("/projects/:id/cap", h(a.admin.SetCap))

	r.NoRoute(a.adapter.NotFound)
	r.NoMethod(a.adapter.NotFound)
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

// limitBody bounds the request body before anything reads it (the CSRF
// check reads forms), by the route the request matched.
func (a *App) limitBody(c *gin.Context) {
	limit := int64(maxFormBytes)
	switch c.FullPath() {
	case importRoute:
		limit = a.maxImportBytes + 1<<20 // the archive and the multipart framing
	case sessionPrefix + inputRoute:
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
