package handlers

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/fault"
	"atelier/models"
	"atelier/views"
)

// Users is the site admins' page of people: adding them, resetting their
// passwords, disabling and enabling them, and the site admin role.
type Users struct {
	Render *views.Renderer
	Auth   *auth.Service
	People *auth.People
	Store  *models.Store
	// Secure says the site is served over TLS, for the reset links it
	// shows (auth.Cookies.AlwaysSecure: behind a proxy the request alone
	// does not tell).
	Secure bool
}

type usersView struct {
	Users   []models.User
	Created string
	// Notice says what the last change did.
	Notice  string
	Link    *resetLinkView // shown once, right after it was made
	Problem *views.Problem
}

// resetLinkView is a reset link as its site admin sees it, once.
type resetLinkView struct {
	User      string    `json:"user"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (v usersView) JSON() any {
	switch {
	case v.Problem != nil:
		return v.Problem
	case v.Link != nil:
		return v.Link
	}
	return v.Users
}

// List shows every user and the form to add one.
func (h *Users) List(c *gin.Context) error {
	v := usersView{Created: c.Query("created")}
	// What a change did is said in the page's own words, never in text
	// from the URL, which anyone could hand a site admin.
	if done, ok := doneWords[c.Query("done")]; ok && models.ValidUsername(c.Query("user")) {
		v.Notice = c.Query("user") + " " + done
	}
	return h.render(c, http.StatusOK, v)
}

// doneWords say what a change did, after the person's name.
var doneWords = map[string]string{
	"disabled":  "is disabled: their sign-ins, edit sessions and shells have ended.",
	"enabled":   "may sign in again.",
	"admin":     "is a site admin.",
	"not-admin": "is no longer a site admin.",
}

// errBadAdminFlag is a change of the site admin role that says neither.
var errBadAdminFlag = fault.New(fault.BadInput, "bad_admin", "handlers: admin is true or false", "Send admin=true or admin=false.")

// Create adds a person.
func (h *Users) Create(c *gin.Context) error {
	name := c.PostForm("username")
	u, err := h.Auth.CreateUser(c.Request.Context(), name, c.PostForm("password"), c.PostForm("admin") == "true")
	if err != nil {
		return h.refuse(c, err)
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusCreated, u)
		return nil
	}
	views.Redirect(c, views.URL("/admin/users").Query("created", u.Username).String())
	return nil
}

// ResetPassword makes a one-time link with which the person sets a new
// password, and shows it to the site admin this once.
func (h *Users) ResetPassword(c *gin.Context) error {
	link, err := h.People.MakeResetLink(c.Request.Context(), auth.User(c), c.Param("user"))
	if err != nil {
		return h.refuse(c, err)
	}
	scheme := "http"
	if h.Secure || c.Request.TLS != nil {
		scheme = "https"
	}
	// The token travels in the query, which request logs leave out.
	u := scheme + "://" + c.Request.Host + views.URL("/password-reset").Query("token", link.Token).String()
	// The page holds a live credential: no cache keeps it.
	c.Header("Cache-Control", "no-store")
	return h.render(c, http.StatusOK, usersView{Link: &resetLinkView{User: link.User.Username, URL: u, ExpiresAt: link.ExpiresAt}})
}

// Disable stops a person from signing in and ends what they run.
func (h *Users) Disable(c *gin.Context) error {
	u, err := h.People.Disable(c.Request.Context(), auth.User(c), c.Param("user"))
	return h.changed(c, u, err, "disabled")
}

// Enable lets a disabled person sign in again.
func (h *Users) Enable(c *gin.Context) error {
	u, err := h.People.Enable(c.Request.Context(), auth.User(c), c.Param("user"))
	return h.changed(c, u, err, "enabled")
}

// SetSiteAdmin grants (form admin=true) or removes (admin=false) the site
// admin role.
func (h *Users) SetSiteAdmin(c *gin.Context) error {
	var admin bool
	switch c.PostForm("admin") {
	case "true":
		admin = true
	case "false":
	default:
		return h.refuse(c, errBadAdminFlag)
	}
	u, err := h.People.SetSiteAdmin(c.Request.Context(), auth.User(c), c.Param("user"), admin)
	done := "not-admin"
	if admin {
		done = "admin"
	}
	return h.changed(c, u, err, done)
}

// changed answers a change of a person: the person for JSON, the page
// again with what changed for a browser.
func (h *Users) changed(c *gin.Context, u *models.User, err error, done string) error {
	if err != nil {
		return h.refuse(c, err)
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusOK, u)
		return nil
	}
	views.Redirect(c, views.URL("/admin/users").Query("done", done).Query("user", u.Username).String())
	return nil
}

// refuse shows a refusal on the page (JSON: the problem); a failure of
// the server's own is an error page, and so is the service's refusal of
// someone who is no site admin, who must not see the list.
func (h *Users) refuse(c *gin.Context, err error) error {
	p := ProblemOf(err)
	if p.Status >= 500 || errors.Is(err, auth.ErrSiteAdminsOnly) {
		return err
	}
	return h.render(c, p.Status, usersView{Problem: p})
}

func (h *Users) render(c *gin.Context, status int, v usersView) error {
	users, err := h.Store.Users(c.Request.Context())
	if err != nil {
		return err
	}
	v.Users = users
	return h.Render.Render(c, status, "users", v)
}
