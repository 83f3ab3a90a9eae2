//go:build linux

package sandbox

import "encoding/json"

// InitSpecSize is the size of what the server sends the init helper to
// run spec, on a Sandbox without cgroups.
func InitSpecSize(sb *Sandbox, spec Spec) (int, error) {
	is, err := sb.prepare(spec)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(is)
	return len(b), err
}
