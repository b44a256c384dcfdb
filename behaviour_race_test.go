//go:build race

package rolloutdb_test

// raceDetector says the tests run under the race detector, which slows
// SQLite (modernc.org/sqlite, C translated to Go) about fortyfold: the
// scale cases size themselves by it.
const raceDetector = true
