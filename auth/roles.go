package auth

import "atelier/fault"

// Role is a person's role in one project.
type Role string

const (
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// ValidRole reports whether r is one of the three roles.
func ValidRole(r Role) bool { return r == RoleOwner || r == RoleAdmin || r == RoleMember }

// Action is something a project member may or may not do.
type Action string

const (
	CodeRead      Action = "code.read"      // see the project, its files and members
	CodeEdit      Action = "code.edit"      // open an edit session, run commands, submit
	ProjectManage Action = "project.manage" // archive, import, add and remove members
	ProjectOwn    Action = "project.own"    // delete, grant or take the owner role
)

// permissions is the one table of who may do what. Anything not listed is
// refused.
var permissions = map[Action][]Role{
	CodeRead:      {RoleOwner, RoleAdmin, RoleMember},
	CodeEdit:      {RoleOwner, RoleAdmin},
	ProjectManage: {RoleOwner, RoleAdmin},
	ProjectOwn:    {RoleOwner},
}

// Can reports whether role may perform action.
func Can(role Role, action Action) bool {
	for _, r := range permissions[action] {
		if r == role {
			return true
		}
	}
	return false
}

// ErrForbidden is a member without the permission an action needs.
var ErrForbidden = fault.New(fault.Forbidden, "forbidden", "auth: your role in this project does not allow that", "Your role in this project does not allow that.")
