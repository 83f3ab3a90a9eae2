package handlers

import (
	"errors"
	"net/http"
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
	Error    string
}

func (v loginView) JSON() any {
	if v.Error != "" {
		return ProblemOf(auth.ErrBadCredentials)
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
	return h.Render.Render(c, http.StatusOK, "login", loginView{Next: next})
}

// Login checks the credentials and starts a session.
func (h *Sessions) Login(c *gin.Context) error {
	username, next := c.PostForm("username"), safeNext(c.PostForm("next"))
	token, _, _, err := h.Auth.Login(c.Request.Context(), username, c.PostForm("password"))
	if errors.Is(err, auth.ErrBadCredentials) {
		return h.Render.Render(c, http.StatusUnauthorized, "login",
			loginView{Next: next, Username: username, Error: "Wrong username or password."})
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

// safeNext keeps a post-sign-in redirect on this site: a path, never
// "//host" or "/\host", which browsers read as another origin.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/projects"
	}
	return next
}
