package importer

import (
	"os"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// The fixtures were written (checked out) just now: every turn is read.
func init() { ActiveWindow = 0 }

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

// kinds is the types of a turn's items, in order.
func kinds(tu Turn) []rollout.ItemType {
	var out []rollout.ItemType
	for _, it := range tu.Items {
		out = append(out, it.Type)
	}
	return out
}
