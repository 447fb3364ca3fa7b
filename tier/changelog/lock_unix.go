//go:build unix

package changelog

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockRoot takes an exclusive flock on path, which the kernel drops when
// the process dies. flock locks belong to the open file, so a second
// provider on the same root fails even inside one process.
func lockRoot(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("changelog: open provider lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		err = fmt.Errorf("changelog: lock provider root %s (is another provider using it?): %w", path, err)
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}
