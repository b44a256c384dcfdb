package projection

import "testing"

func TestWithoutNotKeepsWhatANotExcludesFrom(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`alpha NOT beta`, `alpha`},
		{`alpha NOT beta NOT gamma`, `alpha`},
		{`alpha AND beta NOT gamma`, `alpha AND beta`},
		{`alpha beta NOT gamma`, `alpha AND beta`},
		{`(alpha OR beta) NOT (gamma delta)`, `(alpha OR beta)`},
		{`alpha OR beta NOT gamma`, `alpha OR beta`},
		{`"al pha" NOT "be""ta"`, `"al pha"`},
		{`alp* NOT beta`, `alp*`},
		{`alpha + beta NOT gamma`, `alpha + beta`},
		{`NEAR(alpha beta, 3) NOT gamma`, `NEAR ( alpha beta, 3 )`},
		{`text:alpha NOT beta`, `text:alpha`},
		{`text : alpha NOT beta`, `text : alpha`},
		{`text:(alpha OR beta) NOT gamma`, `text: (alpha OR beta)`},
	} {
		got, found := withoutNot(c.in)
		if !found || got != c.want {
			t.Errorf("withoutNot(%q) = %q, %v; want %q", c.in, got, found, c.want)
		}
	}
	for _, q := range []string{`alpha beta`, `alpha OR beta`, `"alpha NOT beta"`, `alpha NOT`, `NOT alpha`, `(alpha NOT beta`, `"open`} {
		if got, found := withoutNot(q); found || got != q {
			t.Errorf("withoutNot(%q) = %q, %v; want it unchanged", q, got, found)
		}
	}
}
