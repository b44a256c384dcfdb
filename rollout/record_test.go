package rollout

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rolloutdb/rolloutdb/vfs"
)

func strp(s string) *string { return &s }

// allBodies has one body of every known kind, with every field set.
func allBodies() map[Kind]any {
	return map[Kind]any{
		KindThreadOpened: &ThreadOpened{ThreadID: "t1", WorkspaceID: "ws", WorkspacePath: "/w", Source: Source{Kind: SourceSubagent, Client: "cli", Parent: "p", Root: "r", Depth: 2},
			ForkedFrom: &ForkRef{Thread: "src", Turn: "u9"}, Created: fixedTime, Host: "host/1", FormatVersion: 1, Metadata: map[string]string{"k": "v"}},
		KindTurnStarted:          &TurnStarted{Model: "m", Metadata: map[string]string{"a": "b"}},
		KindItemAppended:         &Item{ID: "i1", Type: ItemToolResult, Status: ItemCompleted, Text: "out", CallID: "c1", Name: "shell", Arguments: `{"cmd":"ls"}`, Ref: &ArtifactRef{Path: "tool-results/t1/x", Size: 9, SHA256: "ab"}, Data: map[string]string{"x": "y"}},
		KindTurnCompleted:        &TurnCompleted{Status: TurnStatusCompleted, Usage: Usage{InputTokens: 1, CachedInputTokens: 2, OutputTokens: 3, ReasoningTokens: 4, TotalTokens: 10}},
		KindTurnAborted:          &TurnAborted{Reason: "user"},
		KindModelHistoryAppended: &ModelHistory{Messages: [][]byte{[]byte(`{"role":"user"}`), {0, 1, 2}}},
		KindCheckpoint:           &Checkpoint{ID: "c", CoveredTurn: "u3", ReplacementHistory: [][]byte{[]byte("summary")}, TokensBefore: 1000, TokensAfter: 100, Trigger: TriggerPostTurn},
		KindThreadRolledBack:     &ThreadRolledBack{Turns: 2},
		KindMetadataUpdated:      &MetadataUpdated{Name: strp("n"), Labels: []string{"a", "b"}, Flags: map[string]bool{"pinned": true}, Status: strp("idle")},
		KindArchived:             &Lifecycle{Reason: "done"},
		KindRestored:             &Lifecycle{Reason: "back"},
		KindRecordsLost:          &RecordsLost{Reason: "payload_checksum", Offset: 4096, Length: 300, FirstSeq: 7, LastSeq: 9},
	}
}

func TestRoundTripEveryKind(t *testing.T) {
	for _, compress := range []int{-1, 1} {
		name := map[int]string{-1: "plain", 1: "zstd"}[compress]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			w, path := newRollout(t, vfs.OS, dir, "t1", Options{CompressAbove: compress})
			bodies := allBodies()
			var want []Record
			for _, k := range Kinds[1:] { // thread_opened is seq 1 already
				r, err := NewRecord(k, "turn-1", bodies[k])
				if err != nil {
					t.Fatal(err)
				}
				r.Time = fixedTime
				want = append(want, r)
				if _, err := w.Append(bg, []Record{r}, AppendOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// A batch of several kinds is one frame.
			var batch []Record
			for _, k := range []Kind{KindItemAppended, KindModelHistoryAppended, KindCheckpoint, KindTurnCompleted} {
				r, _ := NewRecord(k, "turn-2", bodies[k])
				batch = append(batch, r)
			}
			res, err := w.Append(bg, batch, AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.LastSeq-res.FirstSeq != 3 {
				t.Fatalf("batch seqs %d..%d", res.FirstSeq, res.LastSeq)
			}
			want = append(want, batch...)
			// A record of a kind from a newer version survives untouched.
			future := Record{Kind: "future_kind", Turn: "turn-2", Body: []byte{0x81, 0xa1, 'x', 0x01}, Time: fixedTime}
			if _, err := w.Append(bg, []Record{future}, AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			want = append(want, future)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			data := mustRead(t, path)
			r, got := readAll(t, data)
			if len(r.Damage()) != 0 || r.TornTail() != nil {
				t.Fatalf("damage %v torn %v", r.Damage(), r.TornTail())
			}
			if got[0].Kind != KindThreadOpened || got[0].Seq != 1 {
				t.Fatalf("first record %v seq %d", got[0].Kind, got[0].Seq)
			}
			h, err := got[0].DecodeBody()
			if err != nil || h.(*ThreadOpened).ThreadID != "t1" {
				t.Fatalf("header body %v %v", h, err)
			}
			got = got[1:]
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d", len(got), len(want))
			}
			for i := range want {
				g, wr := got[i], want[i]
				if g.Seq != uint64(i+2) || g.Kind != wr.Kind || g.Turn != wr.Turn || !bytes.Equal(g.Body, wr.Body) || !g.Time.Equal(wr.Time) {
					t.Fatalf("record %d: got %+v want %+v", i, g, wr)
				}
				if !g.Kind.Known() {
					if _, err := g.DecodeBody(); err == nil || !strings.Contains(err.Error(), "unknown record kind") {
						t.Fatalf("unknown kind decoded: %v", err)
					}
					continue
				}
				v, err := g.DecodeBody()
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(v, bodies[g.Kind]) {
					t.Fatalf("%s body: got %+v want %+v", g.Kind, v, bodies[g.Kind])
				}
			}
		})
	}
}

func TestCompressionPaysOnly(t *testing.T) {
	dir := t.TempDir()
	w, path := newRollout(t, vfs.OS, dir, "t1", Options{CompressAbove: 1024})
	text := strings.Repeat("the agent read the file and found the bug. ", 200)
	if _, err := w.Append(bg, []Record{itemRec(t, "u", text)}, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// Random bytes do not compress: stored plain.
	noise := make([]byte, 8000)
	for i := range noise {
		noise[i] = byte(i*7919 + i*i*31)
	}
	r, _ := NewRecord(KindItemAppended, "u", Item{ID: "n", Type: ItemToolResult, Text: string(noise)})
	if _, err := w.Append(bg, []Record{r}, AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	data := mustRead(t, path)
	if bytes.Contains(data, []byte(text[:200])) {
		t.Fatal("repetitive text was stored uncompressed")
	}
	if int64(len(data)) > int64(len(text))/4+int64(len(noise))+2048 {
		t.Fatalf("file is %d bytes: compression did not pay", len(data))
	}
	_, got := readAll(t, data)
	var it Item
	if err := got[1].Decode(&it); err != nil || it.Text != text {
		t.Fatalf("compressed record did not round trip: %v", err)
	}
}

func TestThreadIDs(t *testing.T) {
	good := []string{"a", "t1", NewID(), "thread_01-x", strings.Repeat("z", 64)}
	for _, id := range good {
		if err := ValidateThreadID(id); err != nil {
			t.Errorf("%q rejected: %v", id, err)
		}
	}
	bad := []string{"", "..", ".", "../x", "a/b", `a\b`, "A", "-a", "_a", "a b", "a\x00", "é", strings.Repeat("z", 65), "t1.rollout"}
	for _, id := range bad {
		err := ValidateThreadID(id)
		if err == nil {
			t.Errorf("%q accepted", id)
			continue
		}
		if _, err := ActivePath("/w/.craft", id); err == nil {
			t.Errorf("ActivePath accepted %q", id)
		}
	}
	// Ids are time-ordered and unique.
	prev := NewID()
	for i := 0; i < 10000; i++ {
		id := NewID()
		if id <= prev {
			t.Fatalf("ids out of order: %s then %s", prev, id)
		}
		prev = id
	}
}

func TestSafeJoin(t *testing.T) {
	root := "/w/.craft"
	for _, rel := range []string{"tool-results/t1/a.txt", "attachments/ab/cd", "x/../y"} {
		p, err := SafeJoin(root, rel)
		if err != nil || !strings.HasPrefix(p, root+"/") {
			t.Errorf("%q: %q %v", rel, p, err)
		}
	}
	for _, rel := range []string{"", ".", "..", "../x", "a/../../x", "/etc/passwd", `..\x`, "a\x00b"} {
		if p, err := SafeJoin(root, rel); err == nil {
			t.Errorf("%q escaped to %q", rel, p)
		}
	}
	if p, err := ArchivedPath(root, "t1"); err != nil || p != filepath.Join(root, ArchivedDir, "t1.rollout") {
		t.Fatal(p, err)
	}
}

func TestRecordTimeIsNanosecondsUTC(t *testing.T) {
	loc := time.FixedZone("x", 3600)
	in := fixedTime.In(loc)
	b := appendEnvelope(nil, &Record{Kind: KindArchived, Time: in})
	var r Record
	if _, err := decodeEnvelope(b, &r, ""); err != nil || !r.Time.Equal(in) || r.Time.Location() != time.UTC {
		t.Fatal(r.Time, err)
	}
}

// Kinds, Known and the body types name the same kinds: a kind added to one
// and not the others would be skipped as unknown, or decoded as nothing.
func TestKindsKnownAndBodiesAgree(t *testing.T) {
	for _, k := range Kinds {
		if !k.Known() || newBody(k) == nil {
			t.Errorf("%s: known %v, body %T", k, k.Known(), newBody(k))
		}
	}
	for _, k := range []Kind{"", "thread_forked", "item_appended2"} {
		if k.Known() || newBody(k) != nil {
			t.Errorf("%q is known", k)
		}
	}
}
