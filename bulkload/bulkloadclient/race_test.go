//go:build race

package bulkloadclient_test

// raceLoadRows replaces loadRows under the race detector, which makes the
// build and the verification scan about five times slower; the
// concurrency it checks does not depend on the row count.
const raceLoadRows = 100_000
