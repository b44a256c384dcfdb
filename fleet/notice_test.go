package fleet

import (
	"reflect"
	"testing"
)

// A notice's payload reads back as the changes written, stays under
// PostgreSQL's limit by going into several notices, and becomes "*" past
// maxNotices; a token a reader does not know makes it look at everything.
func TestNoticeFormat(t *testing.T) {
	changes := []change{
		{kind: changeCreated, tid: 7, id: "t-1_a"},
		{tid: 7, end: 4096},
		{kind: changeArchived, tid: 7, id: "t-1_a"},
		{kind: changeRestored, tid: 8, id: "b"},
		{kind: changeMoved, tid: 9, id: "c"},
		{kind: changeDeleted, tid: 1 << 40, id: "z"},
	}
	ps := notices(changes)
	if len(ps) != 1 || ps[0] != "c7:t-1_a 7:4096 a7:t-1_a r8:b m9:c d1099511627776:z" {
		t.Fatalf("payloads %q", ps)
	}
	got, all := parseNotice(ps[0])
	if all || !reflect.DeepEqual(got, changes) {
		t.Fatalf("read back %+v (all %v)", got, all)
	}

	var many []change
	for i := range 2000 {
		many = append(many, change{tid: int64(1000000 + i), end: int64(1 << 30)})
	}
	ps = notices(many)
	var back []change
	for _, p := range ps {
		if len(p) > maxNotice {
			t.Fatalf("a payload of %d bytes", len(p))
		}
		cs, all := parseNotice(p)
		if all {
			t.Fatalf("payload %q read as all", p[:40])
		}
		back = append(back, cs...)
	}
	if len(ps) < 2 || !reflect.DeepEqual(back, many) {
		t.Fatalf("%d payloads hold %d changes, want %d", len(ps), len(back), len(many))
	}

	var too []change
	for i := range maxNotices * maxNotice / 10 {
		too = append(too, change{tid: int64(i), end: 1 << 40})
	}
	if ps := notices(too); len(ps) != 1 || ps[0] != "*" {
		t.Fatalf("%d changes: %d payloads, want one *", len(too), len(ps))
	}

	for _, bad := range []string{"*", "x7:a", "7", "7:x", "c7:", "a:b", "7:1 q"} {
		if _, all := parseNotice(bad); !all {
			t.Errorf("%q not read as all", bad)
		}
	}
}
