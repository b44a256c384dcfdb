package importer

import "os"

// The fixtures were written (checked out) just now: every turn is read.
func init() { ActiveWindow = 0 }

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }
