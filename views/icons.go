package views

import (
	"path"
	"strings"
)

// iconByExt names the symbol of static/icons.svg drawn beside a file of
// the tree; a file that is none of these gets the plain page.
var iconByExt = map[string]string{
	".go": "code", ".js": "code", ".mjs": "code", ".ts": "code", ".tsx": "code", ".jsx": "code",
	".py": "code", ".rb": "code", ".rs": "code", ".c": "code", ".h": "code", ".cc": "code",
	".cpp": "code", ".java": "code", ".kt": "code", ".php": "code", ".sh": "code", ".sql": "code",
	".html": "markup", ".htm": "markup", ".xml": "markup", ".svg": "markup", ".css": "markup",
	".md": "text", ".txt": "text", ".rst": "text",
	".json": "config", ".yaml": "config", ".yml": "config", ".toml": "config", ".ini": "config",
	".mod": "config", ".sum": "config", ".lock": "config", ".env": "config",
	".png": "image", ".jpg": "image", ".jpeg": "image", ".gif": "image", ".webp": "image", ".ico": "image",
	".zip": "archive", ".gz": "archive", ".tgz": "archive", ".tar": "archive", ".xz": "archive",
}

// iconOf is the icon symbol of an entry of the tree by its kind and name.
func iconOf(kind, name string) string {
	switch kind {
	case "dir":
		return "folder"
	case "symlink":
		return "link"
	case "submodule":
		return "submodule"
	case "file":
	default:
		return "file"
	}
	switch strings.ToLower(name) {
	case "dockerfile", "makefile", ".gitignore", ".dockerignore":
		return "config"
	}
	if icon, ok := iconByExt[strings.ToLower(path.Ext(name))]; ok {
		return icon
	}
	return "file"
}

// crumb is one step of a file's breadcrumbs.
type crumb struct {
	Name, Path string
	Last       bool // the file itself
}

// crumbsOf splits "a/b/c.go" into a, a/b and a/b/c.go.
func crumbsOf(p string) []crumb {
	parts := strings.Split(p, "/")
	out := make([]crumb, len(parts))
	for i, name := range parts {
		out[i] = crumb{Name: name, Path: strings.Join(parts[:i+1], "/"), Last: i == len(parts)-1}
	}
	return out
}
