//go:build !unix

package changelog

import (
	"fmt"
	"os"
)

// lockRoot opens the lock file without locking it: outside unix a second
// provider on the same root is not detected.
func lockRoot(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("changelog: open provider lock: %w", err)
	}
	return f, nil
}
