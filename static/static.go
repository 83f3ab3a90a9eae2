// Package static embeds the stylesheet, the small app script and the
// vendored front-end libraries, so the binary serves everything itself.
package static

import "embed"

// FS holds app.css, app.js and vendor/.
//
//go:embed app.css app.js change.js code.js icons.svg import.js session.js terminal.js vendor
//go:embed tree.js explorer.js favicon.ico
//go:embed search.js watch.js player.js
var FS embed.FS
