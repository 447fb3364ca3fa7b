//go:build !race

package bulkloadclient_test

// raceLoadRows is 0 without the race detector: loadRows applies.
const raceLoadRows = 0
