// Package flock takes the exclusive file locks that keep a directory to one
// process: a changelog root, a tablet server's data directory.
package flock

import "errors"

// ErrLocked: another process (or another open file of this one) holds the
// lock.
var ErrLocked = errors.New("flock: held by another process")
