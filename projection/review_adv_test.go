package projection

import (
	"strings"
	"testing"
	"time"
)

func TestReviewAdversarial(t *testing.T) {
	n := 1 << 18
	for name, q := range map[string]string{
		"quotes":     strings.Repeat(`"`, 2*n+1),
		"notchain":   strings.Repeat("a NOT ", n) + "a",
		"nearopen":   strings.Repeat("NEAR ( ", n),
		"colons":     strings.Repeat("x: ", n) + "a NOT b",
		"deepthenor": strings.Repeat("(", 256) + strings.Repeat("a NOT b OR ", n) + "a" + strings.Repeat(")", 256),
		"plus":       strings.Repeat("a + ", n) + "a NOT b",
		"manyparens": strings.Repeat("(a NOT b) OR ", n) + "a",
		"unclosed":   strings.Repeat("( ", 255) + strings.Repeat("a ", n),
		"strings":    strings.Repeat(`"a""b" `, n) + "NOT c",
	} {
		t0 := time.Now()
		_, found := withoutNot(q)
		t.Logf("%-10s len=%7d found=%v %v", name, len(q), found, time.Since(t0))
	}
}
