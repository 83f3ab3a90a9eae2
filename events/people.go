package events

// What happens to people's accounts. Each is a site-wide event whose actor
// made the change (none for the command line) and whose data names the
// person ("user"); a password's reset also says how ("via").
const (
	UserPasswordChanged = "user.password_changed" // by the person, who gave the old one
	UserResetLinkMade   = "user.reset_link_made"  // a site admin made a one-time link
	UserPasswordReset   = "user.password_reset"   // via "link" or "command line"
	UserDisabled        = "user.disabled"
	UserEnabled         = "user.enabled"
	UserAdminGranted    = "user.site_admin_granted"
	UserAdminRemoved    = "user.site_admin_removed"
)

// personSentence says what an account event did, after its actor's name.
func personSentence(typ string, d data) (string, bool) {
	who := d.User
	switch typ {
	case UserPasswordChanged:
		return "changed their password", true
	case UserResetLinkMade:
		return "made a link for " + who + " to set a new password", true
	case UserPasswordReset:
		if d.Via == "command line" {
			return "reset the password of " + who + " from the command line", true
		}
		return "set a new password with a reset link", true
	case UserDisabled:
		return "disabled " + who + "'s account", true
	case UserEnabled:
		return "enabled " + who + "'s account again", true
	case UserAdminGranted:
		return "made " + who + " a site admin", true
	case UserAdminRemoved:
		return "took the site admin role from " + who, true
	}
	return "", false
}
