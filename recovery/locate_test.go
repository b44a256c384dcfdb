package recovery

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// checkLocated resumes data with Locate and reads every turn's items and
// the model history back through a Locator: they must be what a resume
// without Locate (full, with the same opts) holds, and the rest of the
// state the same.
func checkLocated(t testing.TB, data []byte, opts Options, full *State) {
	t.Helper()
	opts.Locate = true
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("located: %v", err)
	}
	l, err := NewLocator(bytes.NewReader(data), int64(len(data)), "fixture")
	if err != nil {
		t.Fatal(err)
	}
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if a, b := asJSON([]any{st.Header, st.Report, st.Interrupted, st.Metadata, st.LastSeq}), asJSON([]any{full.Header, full.Report, full.Interrupted, full.Metadata, full.LastSeq}); a != b {
		t.Fatalf("located state differs:\n%s\n%s", a, b)
	}
	if len(st.Turns) != len(full.Turns) || len(st.ModelHistory) != 0 {
		t.Fatalf("located: %d turns (want %d), %d messages held (want none)", len(st.Turns), len(full.Turns), len(st.ModelHistory))
	}
	for i, tu := range st.Turns {
		want := full.Turns[i]
		items, err := l.Items(tu)
		if err != nil {
			t.Fatalf("turn %s: %v", tu.ID, err)
		}
		hist, err := l.History(tu, opts.History)
		if err != nil {
			t.Fatalf("turn %s: %v", tu.ID, err)
		}
		got, exp := *tu, *want
		got.Items, got.History, got.ItemAt, got.HistoryAt = items, hist, nil, nil
		if a, b := asJSON(got), asJSON(exp); a != b {
			t.Fatalf("turn %d read back through the locator:\n%s\nwant\n%s", i, a, b)
		}
	}
	var msgs [][]byte
	if err := l.ModelHistory(st, opts.History, func(m []byte) error { msgs = append(msgs, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if a, b := asJSON(msgs), asJSON(full.ModelHistory); a != b {
		t.Fatalf("model history read back through the locator:\n%.400s\nwant\n%.400s", a, b)
	}
}

// A Locator on a file shorter than the one resumed (a torn tail cut since)
// says so for the records past the cut; it never hands out a record it
// could not read whole.
func TestLocatorOnAShorterFile(t *testing.T) {
	paths, _ := globFixtures()
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, Locate: true})
		if err != nil || len(st.Turns) == 0 {
			continue
		}
		last := st.Turns[len(st.Turns)-1]
		if len(last.ItemAt) == 0 {
			continue
		}
		at := last.ItemAt[len(last.ItemAt)-1]
		short := data[:at.Offset+10] // the item's frame cut
		l, err := NewLocator(bytes.NewReader(short), int64(len(data)), p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Record(at); err == nil {
			t.Fatalf("%s: the record at %d read from a file cut at %d", p, at.Offset, len(short))
		}
		return
	}
	t.Fatal("no fixture with a located item")
}
