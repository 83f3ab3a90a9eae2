package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header (the scheme in any case, as RFC 7235 has it), and whether the
// request carries one. Other schemes (a proxy's Basic) are not a bearer.
func BearerToken(r *http.Request) (token string, ok bool) {
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// TokenMatches reports whether a presented token is want, in a time that
// tells nothing of where they differ or how long want is: both are hashed
// first, so the compare runs over equal lengths. An empty want matches
// nothing, so an unset token never lets anyone in.
func TokenMatches(presented, want string) bool {
	if want == "" {
		return false
	}
	p, w := sha256.Sum256([]byte(presented)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(p[:], w[:]) == 1
}
