package liveserver

import (
	"errors"
	"os"
	"path/filepath"

	"atelier/sandbox"
)

// RemoveData removes a stopped server's folder and what its server left
// mounted below it. A server keeps its sessions' checkouts and disks
// mounted when it stops, for its next start to find (and clean up); a
// server that never starts again would leave them, and the loop devices
// under its disks, on the machine for good.
func RemoveData(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	return errors.Join(sandbox.ReleaseBelow(dir), os.RemoveAll(dir))
}
