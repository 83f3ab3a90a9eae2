// Package static embeds the stylesheet, the small app script and the
// vendored front-end libraries, so the binary serves everything itself.
package static

import "embed"

// FS holds app.css, app.js and vendor/.
//
//go:embed app.css app.js session.js terminal.js change.js vendor
var FS embed.FS
