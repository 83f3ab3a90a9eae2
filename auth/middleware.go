package auth

import (
	"crypto/subtle"
	"mime"
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/models"
)

const (
	sessionCookie = "atelier_session"
	// csrfCookie carries the token of a visitor who has not signed in yet, so
	// that the sign-in form is protected too (double-submit).
	csrfCookie = "atelier_csrf"
	// securePrefix names the cookies when they are Secure. A browser takes a
	// cookie of that name only from this very origin over HTTPS, without a
	// Domain, so a sibling subdomain or port cannot set (toss) one: the
	// token of the double-submit is then surely ours, and nobody can plant a
	// sign-in of their own on a visitor.
	securePrefix = "__Host-"

	// CSRFHeader is what htmx and scripts send; CSRFField is the form field.
	CSRFHeader = "X-CSRF-Token"
	CSRFField  = "csrf_token"

	userKey   = "atelier.user"
	csrfKey   = "atelier.csrf"
	signInKey = "atelier.signin"
)

// Cookies decides the cookies' Secure flag and names: Secure always when the
// operator says the site is served over TLS (behind a proxy), else when this
// request is; a Secure cookie's name carries the __Host- prefix.
type Cookies struct {
	AlwaysSecure bool
}

func (ck Cookies) secure(c *gin.Context) bool { return ck.AlwaysSecure || c.Request.TLS != nil }

// name is the name of the cookie base on this request. A cookie of the bare
// name is not read where cookies are Secure: anyone on a sibling origin
// could have set it.
func (ck Cookies) name(c *gin.Context, base string) string {
	if ck.secure(c) {
		return securePrefix + base
	}
	return base
}

func (ck Cookies) get(c *gin.Context, base string) string {
	v, _ := c.Cookie(ck.name(c, base))
	return v
}

func (ck Cookies) set(c *gin.Context, base, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name:     ck.name(c, base),
		Value:    value,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   ck.secure(c),
		SameSite: http.SameSiteLaxMode,
	})
}

// Identify finds who is calling and which CSRF token their pages carry. It
// never refuses: RequireUser and CheckCSRF do.
func (s *Service) Identify(ck Cookies) func(*gin.Context) error {
	return func(c *gin.Context) error {
		token := ck.get(c, sessionCookie)
		ls, u, err := s.Resolve(c.Request.Context(), token)
		switch {
		case err == nil:
			c.Set(userKey, u)
			c.Set(csrfKey, ls.CSRFToken)
			c.Set(signInKey, ls.TokenHash)
			return nil
		case err != ErrSignInRequired:
			return err
		}
		if token != "" {
			ck.set(c, sessionCookie, "", -1) // expired or forged: forget it
		}
		anon := ck.get(c, csrfCookie)
		if len(anon) < 32 {
			anon = randomToken()
			ck.set(c, csrfCookie, anon, 0)
		}
		c.Set(csrfKey, anon)
		return nil
	}
}

// CheckCSRF refuses a request that changes state when a browser says it
// comes from another origin (Sec-Fetch-Site, or else an Origin that is not
// this host), and any without the token of the caller's pages, in the
// X-CSRF-Token header or, for a plain form, the csrf_token field. A client
// that sends neither origin header (not a browser) passes on the token
// alone. The origin is checked first, so a token planted with a tossed
// cookie is never enough. The field is read only from a urlencoded body,
// which the server bounds like every form (1 MiB): any other body (an
// upload's multipart) must carry the header, so nothing of it is read
// before the request is known to be allowed.
func CheckCSRF(c *gin.Context) error {
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	var sameOrigin http.CrossOriginProtection // no trusted origins, no exceptions
	if sameOrigin.Check(c.Request) != nil {
		return ErrCrossOrigin
	}
	want := CSRFToken(c)
	got := c.GetHeader(CSRFHeader)
	if got == "" && IsPlainForm(c.Request) {
		got = c.PostForm(CSRFField)
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return ErrCSRF
	}
	return nil
}

// IsPlainForm reports whether r's body is a urlencoded form, the only kind
// whose fields CheckCSRF reads.
func IsPlainForm(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/x-www-form-urlencoded"
}

// RequireUser refuses anonymous callers.
func RequireUser(c *gin.Context) error {
	if User(c) == nil {
		return ErrSignInRequired
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

// CurrentSignIn names the caller's sign-in (its token's hash), or nil.
func CurrentSignIn(c *gin.Context) []byte {
	v, _ := c.Get(signInKey)
	hash, _ := v.([]byte)
	return hash
}

// CSRFToken returns the token the caller's pages must send back.
func CSRFToken(c *gin.Context) string { return c.GetString(csrfKey) }

// StartSession sets the cookie of a new sign-in.
func (ck Cookies) StartSession(c *gin.Context, token string) {
	ck.set(c, sessionCookie, token, int(SessionTTL.Seconds()))
}

// EndSession clears the sign-in cookie and returns its token.
func (ck Cookies) EndSession(c *gin.Context) string {
	token := ck.get(c, sessionCookie)
	ck.set(c, sessionCookie, "", -1)
	return token
}
