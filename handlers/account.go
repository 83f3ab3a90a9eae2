package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/models"
	"atelier/views"
)

// Account is a person's own page (their password), and the page where a
// reset link of a site admin's sets one.
type Account struct {
	Render *views.Renderer
	People *auth.People
}

type accountView struct {
	Changed bool
	Problem *views.Problem
}

func (v accountView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return gin.H{"changed": v.Changed}
}

// Show renders the person's account page.
func (h *Account) Show(c *gin.Context) error {
	return h.Render.Render(c, http.StatusOK, "account", accountView{Changed: c.Query("changed") == "1"})
}

// ChangePassword sets the person's new password (form password,
// new_password, and its repetition confirm when sent) and signs out every
// other browser of theirs; this one stays signed in.
func (h *Account) ChangePassword(c *gin.Context) error {
	next := c.PostForm("new_password")
	err := confirmed(c, next)
	if err == nil {
		err = h.People.ChangePassword(c.Request.Context(), auth.User(c), auth.CurrentSignIn(c),
			c.PostForm("password"), next, c.ClientIP())
	}
	if err != nil {
		p := ProblemOf(err)
		if p.Status >= 500 || p.Status == http.StatusTooManyRequests {
			return err // a wait is told with its Retry-After
		}
		return h.Render.Render(c, p.Status, "account", accountView{Problem: p})
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusOK, accountView{Changed: true}.JSON())
		return nil
	}
	views.Redirect(c, views.URL("/account").Query("changed", "1").String())
	return nil
}

// confirmed refuses a new password whose repetition, when the form sends
// one, differs.
func confirmed(c *gin.Context, next string) error {
	if again, sent := c.GetPostForm("confirm"); sent && again != next {
		return auth.ErrPasswordsDiffer
	}
	return nil
}

type resetView struct {
	Token   string
	User    *models.User
	Problem *views.Problem
}

func (v resetView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return gin.H{"user": v.User.Username}
}

// ShowReset renders the form a reset link opens, while the link works.
func (h *Account) ShowReset(c *gin.Context) error {
	token := c.Query("token")
	// The page carries the token in its form: no cache keeps it, and no
	// link of it tells another site where it came from.
	c.Header("Cache-Control", "no-store")
	c.Header("Referrer-Policy", "no-referrer")
	u, err := h.People.ResetLinkUser(c.Request.Context(), token)
	if err != nil {
		return h.refuseReset(c, err, "")
	}
	return h.Render.Render(c, http.StatusOK, "password_reset", resetView{Token: token, User: u})
}

// Reset sets the new password with a reset link (form token,
// new_password, confirm) and sends the person to sign in with it.
func (h *Account) Reset(c *gin.Context) error {
	token, next := c.PostForm("token"), c.PostForm("new_password")
	c.Header("Cache-Control", "no-store")
	err := confirmed(c, next)
	var u *models.User
	if err == nil {
		u, err = h.People.UseResetLink(c.Request.Context(), token, next, c.ClientIP())
	}
	if err != nil {
		return h.refuseReset(c, err, token)
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusOK, resetView{User: u}.JSON())
		return nil
	}
	views.Redirect(c, views.URL("/login").Query("reset", "1").String())
	return nil
}

// refuseReset shows the reset page with the refusal; the form comes back
// only while the link may still work (a weak password, say).
func (h *Account) refuseReset(c *gin.Context, err error, token string) error {
	p := ProblemOf(err)
	if p.Status >= 500 {
		return err
	}
	v := resetView{Problem: p}
	if p.Status != http.StatusGone {
		v.Token = token
	}
	return h.Render.Render(c, p.Status, "password_reset", v)
}
