package server

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// A command that prints a line a second shows its first line in the
// workbench while it runs, with its elapsed time and Cancel, and again
// after a reload mid-run; at its end the page says it finished, with its
// exit status and every line.
func TestBrowserCommandOutputLive(t *testing.T) {
	needRoot(t)
	browserCommandOutputLive(t, newHarness(t))
}

func TestBrowserCommandOutputLiveInAPod(t *testing.T) {
	needRoot(t)
	browserCommandOutputLive(t, newHarness(t, onKube(t)))
}

func browserCommandOutputLive(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	s, base := owner.session(id)
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	const script = `for i in 1 2 3 4 5 6 7 8; do echo "line-$i"; sleep 1; done`
	stillRunning := func(when string) {
		t.Helper()
		for _, c := range h.app.Runtime.RunningCommands() {
			if c.SessionID == s.ID {
				return
			}
		}
		t.Fatalf("%s: the command had already ended; the test proves nothing", when)
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v; the page has %s", what, err, pageState(ctx))
		}
	}
	step("the first line while it runs",
		signIn(h, "owner", "password-owner"),
		chromedp.Navigate(h.srv.URL+base),
		chromedp.WaitReady(css(`#session[data-started]`)),
		chromedp.Click(css(`#panel-tab-command`)),
		typeInto(`#command-form input[name=command]`, script),
		chromedp.Click(css(`#command-run`)),
		showsText(`#command-result pre.live`, "line-1"),
		untilPage(`document.querySelector("#command-state").dataset.state === "running"`),
		shows(`#command-cancel`),
	)
	stillRunning("the first line")

	step("the first line again after a reload",
		chromedp.Reload(),
		chromedp.WaitReady(css(`#session[data-started]`)),
		showsText(`#command-result pre.live`, "line-1"),
		showsText(`#command-state`, "Running "+script),
		shows(`#command-cancel`),
	)
	stillRunning("the reload")

	step("the end",
		showsText(`#command-state`, "Finished in"),
		shows(`#command-result .command-result[data-exit="0"]`),
	)
	text, err := chromedp.Run(ctx, chromedp.Text(css(`#command-result`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "exit 0") || strings.Count(text, "line-") != 8 || !strings.Contains(text, "line-1\nline-2") || !strings.Contains(text, "line-8") {
		t.Fatalf("after the reload the result reads %q", text)
	}
	if cancel, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#command-cancel").hidden`)); !cancel {
		t.Fatal("Cancel is still shown after the end")
	}
}
