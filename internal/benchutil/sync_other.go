//go:build !unix

package benchutil

import "time"

// SyncDirty does nothing where there is no sync(2); dirty is -1.
func SyncDirty() (took time.Duration, dirty int64) { return 0, -1 }
