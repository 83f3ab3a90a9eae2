//go:build linux

package injail

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPlaceInJailFollowsLinksInsideOnly: a jail root whose /etc/resolv.conf
// is a link, as a host with systemd-resolved gives it, gets the file where
// the link leads, read in the jail's own tree; ways into the session's
// folders, loops and read-only places get nothing.
func TestPlaceInJailFollowsLinksInsideOnly(t *testing.T) {
	tests := []struct {
		name  string
		links map[string]string // jail path -> link text
		dirs  []string
		want  string // jail path of the file written, "" for none
	}{
		{name: "relative into /run", links: map[string]string{"/etc/resolv.conf": "../run/systemd/resolve/stub-resolv.conf"},
			want: "/run/systemd/resolve/stub-resolv.conf"},
		{name: "absolute, through a link of the root", dirs: []string{"/usr/run"},
			links: map[string]string{"/etc/resolv.conf": "/var/run/resolv.conf", "/var": "usr"},
			want:  "/usr/run/resolv.conf"},
		{name: "dot-dots stay in the jail", links: map[string]string{"/etc/resolv.conf": "../../../../resolv.conf"},
			want: "/resolv.conf"},
		{name: "into the session's /tmp", links: map[string]string{"/etc/resolv.conf": "/tmp/resolv.conf"}},
		{name: "into the checkout by a second link", links: map[string]string{"/etc/resolv.conf": "/run/r", "/run": "workspace"}},
		{name: "a loop", links: map[string]string{"/etc/resolv.conf": "/etc/a", "/etc/a": "resolv.conf"}},
		{name: "back out of a missing folder into /tmp", links: map[string]string{"/etc/resolv.conf": "/run/none/../../tmp/resolv.conf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range append([]string{"/etc", "/tmp", "/workspace"}, tt.dirs...) {
				if err := os.MkdirAll(root+d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for p, target := range tt.links {
				if err := os.Symlink(target, root+p); err != nil {
					t.Fatal(err)
				}
			}
			at, err := placeInJail(root, "/etc/resolv.conf", "nameserver 10.0.2.3\n", true)
			if err != nil || at != tt.want {
				t.Fatalf("placeInJail = %q, %v; want %q", at, err, tt.want)
			}
			var written []string
			filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() {
					written = append(written, p[len(root):])
				}
				return nil
			})
			if tt.want == "" && len(written) != 0 || tt.want != "" && (len(written) != 1 || written[0] != tt.want) {
				t.Errorf("files written: %v; want %q", written, tt.want)
			}
		})
	}
}
