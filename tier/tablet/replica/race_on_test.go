//go:build race

package replica

// raceFactor scales memory bounds: the race detector shadows memory and
// goroutine stacks.
const raceFactor = 4
