package server

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In a browser: a person reaches their account from the top bar and
// changes their password, which signs out their other browser; a site
// admin makes a reset link on the users page, and the link sets the
// person's password and sends them to sign in with it.
func TestBrowserPeople(t *testing.T) {
	h := newHarness(t)
	h.user("root", true)
	elsewhere := h.user("alice", false)

	ctx := browser(t)
	err := do(ctx,
		signIn(h, "alice", "password-alice"),
		chromedp.Click(chromedp.CSS(`header.top a.who`)),
		shows(`form#change-password`),
		typeInto(`form#change-password input[name=password]`, "password-alice"),
		typeInto(`form#change-password input[name=new_password]`, "changed-in-browser"),
		typeInto(`form#change-password input[name=confirm]`, "changed-in-browser"),
		chromedp.Submit(chromedp.CSS(`form#change-password`)),
		showsText(`.notice`, "signed out"),
	)
	if err != nil {
		t.Fatalf("changing the password: %v\n%s", err, pageState(ctx))
	}
	screenshot(ctx, t, "account")
	if elsewhere.signedIn() {
		t.Fatal("alice's other browser is still signed in")
	}

	admin := browser(t)
	err = do(admin,
		signIn(h, "root", "password-root"),
		chromedp.Navigate(h.srv.URL+"/admin/users"),
		chromedp.Click(chromedp.CSS(`tr[data-user="alice"] form[action="/admin/users/alice/reset-password"] button`)),
		shows(`.reset-link input.link-once`),
	)
	if err != nil {
		t.Fatalf("making a link: %v\n%s", err, pageState(admin))
	}
	link, err := chromedp.Run(admin, chromedp.Evaluate[string](`document.querySelector(".reset-link input.link-once").value`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(admin, t, "users")
	if !strings.HasPrefix(link, h.srv.URL+"/password-reset?token=") {
		t.Fatalf("the link shown: %q", link)
	}

	person := browser(t)
	err = do(person,
		chromedp.Navigate(link),
		shows(`form#reset-password`),
		typeInto(`form#reset-password input[name=new_password]`, "set-in-browser"),
		typeInto(`form#reset-password input[name=confirm]`, "set-in-browser"),
		chromedp.Submit(chromedp.CSS(`form#reset-password`)),
		showsText(`.notice`, "Sign in with it"),
		signIn(h, "alice", "set-in-browser"),
	)
	if err != nil {
		t.Fatalf("using the link: %v\n%s", err, pageState(person))
	}
}
