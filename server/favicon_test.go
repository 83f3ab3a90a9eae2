package server

import (
	"net/http"
	"strings"
	"testing"
)

// Every page's browser asks for /favicon.ico; the binary serves its own,
// to anyone, signed in or not.
func TestFavicon(t *testing.T) {
	h := newHarness(t)
	res := h.anonymous().get("/favicon.ico", nil)
	body := readBody(res)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "image/") || !strings.HasPrefix(body, "\x00\x00\x01\x00") {
		t.Fatalf("GET /favicon.ico: %d %q, %d bytes starting %q", res.StatusCode, res.Header.Get("Content-Type"), len(body), body[:min(4, len(body))])
	}
}
