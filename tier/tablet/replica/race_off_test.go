//go:build !race

package replica

const raceFactor = 1
