//go:build !unix

package rolloutdb_test

import "time"

// processorTime is not measured here (BenchmarkFollow reports 0).
func processorTime() time.Duration { return 0 }
