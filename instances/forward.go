package instances

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// ForwardHeader marks a request one instance handed another: the sender,
// when, and an HMAC-SHA256 with the cluster's shared secret over those and
// the request's method and URI. The receiver serves such a request itself
// (it never hands it on again) after authorizing it as any other: the
// mark says where it came from, not who may do what.
const ForwardHeader = "X-Atelier-Forwarded"

// forwardFresh is how old a mark may be, either way of the receiver's
// clock.
const forwardFresh = 30 * time.Second

// SignForward is the mark of a request from instance from, at now.
func SignForward(secret []byte, from, method, uri string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return from + " " + ts + " " + forwardMAC(secret, from, ts, method, uri)
}

// VerifyForward says mark is a fresh mark of this request made with
// secret.
func VerifyForward(secret []byte, mark, method, uri string, now time.Time) bool {
	from, rest, ok := strings.Cut(mark, " ")
	if !ok || len(secret) == 0 {
		return false
	}
	ts, mac, ok := strings.Cut(rest, " ")
	if !ok {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if age := now.Sub(time.Unix(sec, 0)); age > forwardFresh || age < -forwardFresh {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(forwardMAC(secret, from, ts, method, uri)))
}

func forwardMAC(secret []byte, from, ts, method, uri string) string {
	m := hmac.New(sha256.New, secret)
	for _, part := range []string{from, ts, method, uri} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}
