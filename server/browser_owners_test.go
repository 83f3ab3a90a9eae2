package server

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// carol, offered the ownership of two of eve's projects, finds both offers
// on her projects page, accepts one and declines the other with its
// buttons; the page answers in place, and only the accepted one is hers.
func TestBrowserAnswerOwnership(t *testing.T) {
	h := newHarness(t)
	eve := h.user("eve", false)
	h.user("carol", false)
	garden := eve.createProject("Garden")
	orchard := eve.createProject("Orchard")
	eve.offerOwnership(garden, "carol")
	eve.offerOwnership(orchard, "carol")
	ctx := browser(t)
	offer := func(id int64) string { return `.invitation[data-project="` + itoa(id) + `"]` }

	err := do(ctx,
		signIn(h, "carol", "password-carol"),
		showsText(offer(garden), "eve invites you to become an owner of Garden"),
		showsText(offer(orchard), "eve invites you to become an owner of Orchard"),
		chromedp.Click(chromedp.CSS(offer(garden)+` button.accept`)),
		showsText(`#projects-page .notice`, "You are now an owner"),
		shows(`.cards.projects a[href="/projects/`+itoa(garden)+`"]`),
		untilPage(`!document.querySelector(`+jsString(offer(garden))+`)`),
		chromedp.Click(chromedp.CSS(offer(orchard)+` button.decline`)),
		showsText(`#projects-page .notice`, "You declined the invitation"),
		untilPage(`document.querySelectorAll(".invitation").length === 0`),
	)
	if err != nil {
		t.Fatalf("answering the offers: %v; the page has %s", err, pageState(ctx))
	}
	// The answers were made in place, by htmx, not by leaving the page.
	if location, err := chromedp.Run(ctx, chromedp.Location()); err != nil || location != h.srv.URL+"/projects" {
		t.Fatalf("the page moved to %s (%v)", location, err)
	}
	if role := memberRoles(t, h, garden)["carol"]; role != "owner" {
		t.Fatalf("carol is %q of Garden after accepting", role)
	}
	if role, ok := memberRoles(t, h, orchard)["carol"]; ok {
		t.Fatalf("carol is %q of Orchard after declining", role)
	}
	if n := len(memberRoles(t, h, orchard)); n != 1 {
		t.Fatalf("Orchard has %d members after the decline", n)
	}
}
