package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"atelier/testrig/wait"
)

// inputPosts counts the terminal input requests the server has logged.
var inputPosts = regexp.MustCompile(`method=POST path=\S+/terminals/\S+/input status=200`)

// TestBrowserTypingAhead: the page sends what is typed while a request is
// on its way in the next one, so 10,000 keys typed at once reach the
// server in a couple of requests, in order and exactly once; and a batch
// whose answer is lost after the server applied it is sent again under the
// same X-Input-Seq and applied once.
func TestBrowserTypingAhead(t *testing.T) {
	needRoot(t)
	browserTypingAhead(t, newHarness(t))
}

func TestBrowserTypingAheadInAPod(t *testing.T) {
	needRoot(t)
	browserTypingAhead(t, newHarness(t, onKube(t)))
}

func browserTypingAhead(t *testing.T, h *harness) {
	_, id := editable(t, h)
	ctx := browser(t)
	term := openTerminalPage(t, ctx, h.srv.URL, id)
	waitScreen, typeKeys := term.waitScreen, term.typeKeys
	keys := func(n int) (string, string) {
		var b strings.Builder
		for i := range n {
			b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[i*7%36])
		}
		sum := sha256.Sum256([]byte(b.String()))
		return b.String(), hex.EncodeToString(sum[:])
	}
	posts := func() int { return len(inputPosts.FindAllString(h.logs.String(), -1)) }

	waitScreen("a prompt", "$")
	// The shell counts what it is given: raw, without echo, exactly n bytes.
	typeKeys("stty raw -echo; echo RE''ADY; head -c 10000 | sha256sum; stty sane\r")
	waitScreen("the shell ready for the keys", "READY")
	text, sum := keys(10_000)
	before := posts()
	typeKeys(text)
	waitScreen("the keys' checksum", sum)
	if n := posts() - before; n < 1 || n > 2 {
		t.Errorf("10,000 keys typed at once took %d requests, want 1 or 2", n)
	}

	// The answer to the next batch is lost on its way back, after the
	// server applied it: the page sends the same batch again.
	typeKeys("stty raw -echo; echo AG''AIN; head -c 3000 | sha256sum; stty sane\r")
	waitScreen("the shell ready again", "AGAIN")
	paused := holdRequests(t, ctx, "*/input", fetch.RequestStageResponse)
	answers := make(chan error, 1)
	go func() {
		lost := false
		for id := range paused {
			step := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				if !lost {
					lost = true
					_, err := cdp.Call(ctx, tg, fetch.FailRequest, fetch.FailRequestParams{RequestID: id, ErrorReason: network.ErrorReasonConnectionReset})
					return err
				}
				_, err := cdp.Call(ctx, tg, fetch.ContinueResponse, fetch.ContinueResponseParams{RequestID: id})
				return err
			})
			if err := do(ctx, step); err != nil {
				answers <- err
				return
			}
		}
	}()
	text, sum = keys(3000)
	before = posts()
	typeKeys(text)
	waitScreen("the checksum of keys sent twice", sum)
	wait.ForNil(t, wait.Long, "the batch whose answer was lost to be sent again", func() error {
		if n := posts() - before; n < 2 {
			return fmt.Errorf("%d requests", n)
		}
		return nil
	})
	select {
	case err := <-answers:
		t.Fatalf("intercepting the input requests: %v", err)
	default:
	}
	if n := posts() - before; n != 2 {
		t.Errorf("a batch whose answer was lost reached the server %d times, want 2 (sent, then sent again)", n)
	}
	// Applied twice, the second copy would reach the shell's prompt, which
	// echoes again, and show.
	typeKeys("echo DO''NE\r")
	waitScreen("the shell after the keys", "DONE")
	if screen := term.screen(); strings.Contains(screen, text[:40]) {
		t.Errorf("the batch sent again reached the shell twice; the terminal shows %q", screen)
	}
}
