package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/static"
)

// routes registers every URL of Atelier; the whole surface reads top to
// bottom here.
func (a *App) routes() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.ContextWithFallback = true
	r.Use(a.recover, a.logRequests, securityHeaders, limitBody(maxFormBytes))
	h := a.adapter.Handle

	r.GET("/healthz", a.health.Show)
	r.StaticFS("/static", http.FS(static.FS))

	site := r.Group("/", h(a.auth.Identify(a.cookies)), h(auth.CheckCSRF))
	site.GET("/", func(c *gin.Context) { c.Redirect(http.StatusSeeOther, "/projects") })
	site.GET("/login", h(a.sessions.ShowLogin))
	site.POST("/login", h(a.sessions.Login))
	site.POST("/logout", h(a.sessions.Logout))

	in := site.Group("/", h(auth.RequireUser))
	in.GET("/projects", h(a.projects.List))
	in.GET("/projects/new", h(a.projects.New))
	in.POST("/projects", h(a.projects.Create))
	in.POST("/projects/validate-path", h(a.projects.ValidatePath))
	in.GET("/projects/:id", h(a.projects.Show))
	in.POST("/projects/:id/archive", h(a.projects.Archive))
	in.DELETE("/projects/:id", h(a.projects.Delete))
	in.POST("/projects/:id/members", h(a.projects.AddMember))
	in.DELETE("/projects/:id/members/:user", h(a.projects.RemoveMember))

	admin := in.Group("/admin", h(auth.RequireSiteAdmin))
	admin.GET("/users", h(a.users.List))
	admin.POST("/users", h(a.users.Create))

	r.NoRoute(a.adapter.NotFound)
	r.NoMethod(a.adapter.NotFound)
	return r
}

// maxFormBytes bounds every request body; no form of Atelier comes near it.
const maxFormBytes = 1 << 20

func limitBody(n int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, n)
	}
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
