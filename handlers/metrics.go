package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
)

// Metrics serves GET /metrics to the operator's monitoring (a bearer token)
// and to site admins (their sign-in).
type Metrics struct {
	Token    string // ATELIER_METRICS_TOKEN; empty: site admins only
	Identify Func   // the sign-in cookie, read only when no bearer token is sent
	Serve    http.Handler
}

// Scrape authorizes, then serves the metrics. A request with a bearer
// token is decided by the token alone; one without must come from a signed-in
// site admin. Everyone else gets the 404 of a URL that does not exist (a
// wrong token included), before anything is gathered: a refused request
// costs a hash compare, or the sign-in lookup every page does.
func (m *Metrics) Scrape(c *gin.Context) error {
	if token, ok := auth.BearerToken(c.Request); ok {
		if !auth.TokenMatches(token, m.Token) {
			return errNoRoute
		}
	} else {
		if err := m.Identify(c); err != nil {
			return err
		}
		if u := auth.User(c); u == nil || !u.IsAdmin {
			return errNoRoute
		}
	}
	m.Serve.ServeHTTP(c.Writer, c.Request)
	return nil
}
