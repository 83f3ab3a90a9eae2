package auth

import (
	"crypto/subtle"
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/models"
)

const (
	sessionCookie = "atelier_session"
	// csrfCookie carries the token of a visitor who has not signed in yet, so
	// that the sign-in form is protected too (double-submit).
	csrfCookie = "atelier_csrf"

	// CSRFHeader is what htmx and scripts send; CSRFField is the form field.
	CSRFHeader = "X-CSRF-Token"
	CSRFField  = "csrf_token"

	userKey = "atelier.user"
	csrfKey = "atelier.csrf"
)

// Cookies decides the cookies' Secure flag: always when the operator says the
// site is served over TLS (behind a proxy), else when this request is.
type Cookies struct {
	AlwaysSecure bool
}

func (ck Cookies) set(c *gin.Context, name, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name:     name,
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   ck.AlwaysSecure || c.Request.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
}

// Identify finds who is calling and which CSRF token their pages carry. It
// never refuses: RequireUser and CheckCSRF do.
func (s *Service) Identify(ck Cookies) func(*gin.Context) error {
	return func(c *gin.Context) error {
		token, _ := c.Cookie(sessionCookie)
		ls, u, err := s.Resolve(c.Request.Context(), token)
		switch {
		case err == nil:
			c.Set(userKey, u)
			c.Set(csrfKey, ls.CSRFToken)
			return nil
		case err != ErrSignInRequired:
			return err
		}
		if token != "" {
			ck.set(c, sessionCookie, "", -1) // expired or forged: forget it
		}
		anon, _ := c.Cookie(csrfCookie)
		if len(anon) < 32 {
			anon = randomToken()
			ck.set(c, csrfCookie, anon, 0)
		}
		c.Set(csrfKey, anon)
		return nil
	}
}

// CheckCSRF refuses a request that changes state without the token of the
// caller's pages, in the X-CSRF-Token header or the csrf_token form field.
func CheckCSRF(c *gin.Context) error {
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	want := CSRFToken(c)
	got := c.GetHeader(CSRFHeader)
	if got == "" {
		got = c.PostForm(CSRFField)
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return ErrCSRF
	}
	return nil
}

// RequireUser refuses anonymous callers.
func RequireUser(c *gin.Context) error {
	if User(c) == nil {
		return ErrSignInRequired
	}
	return nil
}

// RequireSiteAdmin refuses callers who are not site admins.
func RequireSiteAdmin(c *gin.Context) error {
	u := User(c)
	if u == nil {
		return ErrSignInRequired
	}
	if !u.IsAdmin {
		return ErrNotSiteAdmin
	}
	return nil
}

// HideFromNonAdmins answers everyone but site admins with
// ErrSiteAdminsOnly, a 404, before anything else runs.
func HideFromNonAdmins(c *gin.Context) error {
	if u := User(c); u == nil || !u.IsAdmin {
		return ErrSiteAdminsOnly
	}
	return nil
}

// User returns the signed-in user, or nil.
func User(c *gin.Context) *models.User {
	u, _ := c.Get(userKey)
	user, _ := u.(*models.User)
	return user
}

// CSRFToken returns the token the caller's pages must send back.
func CSRFToken(c *gin.Context) string { return c.GetString(csrfKey) }

// StartSession sets the cookie of a new sign-in.
func (ck Cookies) StartSession(c *gin.Context, token string) {
	ck.set(c, sessionCookie, token, int(SessionTTL.Seconds()))
}

// EndSession clears the sign-in cookie and returns its token.
func (ck Cookies) EndSession(c *gin.Context) string {
	token, _ := c.Cookie(sessionCookie)
	ck.set(c, sessionCookie, "", -1)
	return token
}
