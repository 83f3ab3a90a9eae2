package handlers

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/views"
)

// Sessions signs people in and out.
type Sessions struct {
	Render  *views.Renderer
	Auth    *auth.Service
	Cookies auth.Cookies
}

type loginView struct {
	Next     string
	Username string
	Problem  *views.Problem
	// Reset says the person just set a new password with a reset link.
	Reset bool
}

func (v loginView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return gin.H{"next": v.Next}
}

// ShowLogin renders the sign-in form.
func (h *Sessions) ShowLogin(c *gin.Context) error {
	next := safeNext(c.Query("next"))
	if auth.User(c) != nil {
		views.Redirect(c, next)
		return nil
	}
	return h.Render.Render(c, http.StatusOK, "login", loginView{Next: next, Reset: c.Query("reset") == "1"})
}

// Login checks the credentials and starts a session. A throttled attempt
// (auth.ErrTooManyAttempts) is answered as an error, 429 with Retry-After.
// The client's address is the connection's, or the X-Forwarded-For entry
// added by a proxy the operator trusts (ATELIER_TRUSTED_PROXIES).
func (h *Sessions) Login(c *gin.Context) error {
	username, next := c.PostForm("username"), safeNext(c.PostForm("next"))
	token, _, _, err := h.Auth.Login(c.Request.Context(), username, c.PostForm("password"), c.ClientIP())
	if errors.Is(err, auth.ErrBadCredentials) || errors.Is(err, auth.ErrDisabled) {
		p := ProblemOf(err)
		return h.Render.Render(c, p.Status, "login", loginView{Next: next, Username: username, Problem: p})
	}
	if err != nil {
		return err
	}
	h.Cookies.StartSession(c, token)
	views.Redirect(c, next)
	return nil
}

// Logout ends the session.
func (h *Sessions) Logout(c *gin.Context) error {
	if err := h.Auth.Logout(c.Request.Context(), h.Cookies.EndSession(c)); err != nil {
		return err
	}
	views.Redirect(c, "/login")
	return nil
}

// safeNext keeps a post-sign-in redirect on this site. Browsers are lenient
// with a Location: they drop tabs and newlines, read "\" as "/", and take
// "//host" or "/\host" for another origin. So next must be a plain local
// path, or the person goes to their projects: no control character, as sent
// or once percent-decoded; no percent-encoded slash or backslash in the path,
// where a server or a browser may decode it into one; and one "/" followed by
// neither "/" nor "\". The query may hold an encoded slash: it is never read
// as a host, and links to folders carry their path there.
func safeNext(next string) string {
	const home = "/projects"
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return home
	}
	decoded, err := url.PathUnescape(next)
	if err != nil || hasControl(next) || hasControl(decoded) {
		return home
	}
	pathPart, _, _ := strings.Cut(strings.ToLower(next), "?")
	if strings.Contains(pathPart, "%2f") || strings.Contains(pathPart, "%5c") {
		return home
	}
	return next
}

// hasControl reports an ASCII control character, which browsers strip from
// a URL before they read it.
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}
