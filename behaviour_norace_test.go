//go:build !race

package rolloutdb_test

// raceDetector says the tests run under the race detector (see
// behaviour_race_test.go).
const raceDetector = false
