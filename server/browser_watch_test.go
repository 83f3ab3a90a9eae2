package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// watchedRows is the watch page's terminal screen, as xterm draws it.
const watchedRows = `(document.querySelector("#watch-pane")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "").replaceAll("\n", "")`

// TestBrowserWatchASharedTerminal: the owner shares a terminal from the
// session page with a member, who watches it on a page of their own (what
// was already shown, and what comes), sees it is read-only, and is told
// when the owner stops sharing; the owner's panel says who watches.
func TestBrowserWatchASharedTerminal(t *testing.T) {
	needRoot(t)
	browserWatchASharedTerminal(t, newHarness(t))
}

func TestBrowserWatchASharedTerminalInAPod(t *testing.T) {
	needRoot(t)
	browserWatchASharedTerminal(t, newHarness(t, onKube(t)))
}

func browserWatchASharedTerminal(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	h.user("bob", false)
	owner.addMember(id, "bob", "member")
	ctx := browser(t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	p := openTerminalPage(t, ctx, h.srv.URL, id)
	p.typeKeys("echo shared-$((6*7))\r")
	p.waitScreen("the owner's output", "shared-42")

	if err := do(ctx,
		chromedp.Click(css(`#share-terminal`)),
		shows(`#terminal-shares input[name=username]`),
		typeInto(`#terminal-shares input[name=username]`, "bob"),
		chromedp.Click(css(`#terminal-shares button[type=submit]`)),
		showsText(`#terminal-shares li[data-user=bob]`, "not watching"),
	); err != nil {
		t.Fatalf("sharing: %v; the page has %s", err, pageState(ctx))
	}
	watchURL, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#terminal-shares a").getAttribute("href")`))
	if err != nil || !strings.HasSuffix(watchURL, "/watch") {
		t.Fatalf("the watch address %q: %v", watchURL, err)
	}

	// bob, in a browser of his own. (A second context of the owner's
	// browser stops answering while the owner's page has the focus.)
	bob := browser(t)
	if err := do(bob,
		signIn(h, "bob", "password-bob"),
		chromedp.Navigate(h.srv.URL+watchURL),
		showsText(`#watch-status`, "Watching live"),
	); err != nil {
		t.Fatalf("watching: %v; the page has %s", err, pageState(bob))
	}
	watched := func(what, text string) {
		t.Helper()
		if err := do(bob, untilPage(fmt.Sprintf(`%s.includes(%q)`, watchedRows, text))); err != nil {
			t.Fatalf("%s: %v; bob's page has %s", what, err, pageState(bob))
		}
	}
	watched("what the terminal showed before", "shared-42")
	p.typeKeys("echo more-$((7*7))\r")
	watched("what comes after", "more-49")

	// The owner records the terminal: both pages say so.
	if err := do(ctx,
		chromedp.Click(css(`#record-terminal`)),
		shows(`.terminal-tab .rec-mark`),
		showsText(`#record-terminal`, "Stop recording"),
	); err != nil {
		t.Fatalf("recording: %v; the page has %s", err, pageState(ctx))
	}
	if err := do(bob, shows(`#watch-rec`)); err != nil {
		t.Fatalf("bob's page does not say the terminal is recorded: %v; it has %s", err, pageState(bob))
	}
	p.typeKeys("echo recorded-$((9*9))\r")
	p.waitScreen("the recorded output", "recorded-81")
	// Keys typed on bob's page go nowhere: the owner's terminal, which
	// goes on, never shows them.
	if _, err := chromedp.Run(bob, chromedp.Evaluate[bool](`(() => {
		const area = document.querySelector("#watch-pane").shadowRoot.querySelector(".xterm-helper-textarea");
		if (area) for (const key of "echo from-bob\r") area.dispatchEvent(new InputEvent("input", {data: key, inputType: "insertText", bubbles: true}));
		return true;
	})()`)); err != nil {
		t.Fatal(err)
	}
	p.typeKeys("echo after-$((8*8))\r")
	p.waitScreen("the owner's next output", "after-64")
	if strings.Contains(p.screen(), "from-bob") {
		t.Fatalf("keys typed by the watcher reached the terminal: %q", p.screen())
	}

	// The owner's panel, opened again, says bob watches.
	if err := do(ctx,
		chromedp.Click(css(`#share-terminal`)),
		chromedp.Click(css(`#share-terminal`)),
		showsText(`#terminal-shares li[data-user=bob]`, "watching now"),
		chromedp.Click(css(`#terminal-shares li[data-user=bob] button`)),
		showsText(`#terminal-shares`, "Nobody else sees this terminal."),
	); err != nil {
		t.Fatalf("stopping the share: %v; the page has %s", err, pageState(ctx))
	}
	if err := do(bob, showsText(`#watch-status`, "You can no longer watch this terminal")); err != nil {
		t.Fatalf("bob was not told: %v; the page has %s", err, pageState(bob))
	}

	// Stopped, the recording is listed and plays on its own page.
	if err := do(ctx,
		chromedp.Click(css(`#record-terminal`)),
		showsText(`#record-terminal`, "Record"),
		showsText(`#session-recordings`, "Play"),
		// Clicked in the page, where it is found: the list may be drawn
		// again between a lookup and a click from here.
		untilPage(`(() => { const a = document.querySelector("#session-recordings li a:not([download])"); if (!a) return false; a.click(); return true })()`),
		untilPage(`(document.querySelector("#player")?.shadowRoot?.querySelector(".xterm-rows")?.innerText ?? "").includes("recorded-81")`),
		showsText(`#player-time`, "The end"),
	); err != nil {
		t.Fatalf("playing the recording: %v; the page has %s", err, pageState(ctx))
	}
	screenshot(ctx, t, "recording")
}
