package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	stderrors "errors"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// The recovery fixtures in ../testdata/corrupt/rec-*: damaged rollouts made
// from clean ones written by the real writer, each with a hand-written
// expectation of what Resume must return. Regenerate after a format change:
//
//	go test ./recovery -run TestRecoveryFixtures -update-fixtures
//
// The expectations are written here by hand, not derived from running
// Resume, so regenerating cannot hide a change in behaviour.
var updateFixtures = flag.Bool("update-fixtures", false, "rewrite testdata/corrupt/rec-* fixtures")

const fixtureDir = "../testdata/corrupt"

const (
	fxThread    = "fixture"
	fxWorkspace = "ws-fixture"
)

var ctx = context.Background()

// expectation is what Resume must return for a fixture.
type expectation struct {
	Description string   `json:"description"`
	Error       string   `json:"error,omitempty"` // identity error name, if Resume must fail
	Turns       []string `json:"turns"`           // visible turns, in order
	Interrupted []string `json:"interrupted"`
	Rebuilt     []string `json:"rebuilt"`
	Checkpoint  string   `json:"checkpoint_covers"` // covered turn of the checkpoint used, "" if none
	PassedOver  []string `json:"passed_over"`       // why each later checkpoint was passed over
	TornTail    bool     `json:"torn_tail"`
	Skipped     []string `json:"skipped"` // reasons, in file order
	LostItems   int      `json:"lost_items"`
}

var identityNames = map[string]error{
	"no_header":          ErrNoHeader,
	"thread_mismatch":    ErrThreadMismatch,
	"workspace_mismatch": ErrWorkspaceMismatch,
	"identity_conflict":  ErrIdentityConflict,
}

// frameRef is where one frame of a built rollout landed.
type frameRef struct{ off, end int64 }

// builder writes a clean rollout turn by turn and remembers where frames
// landed, so that a fixture can damage one precisely.
type builder struct {
	t      testing.TB
	w      *rollout.Writer
	path   string
	frames map[string]frameRef
	turns  int
	items  int // items written (each a distinct text)
}

func newBuilder(t testing.TB, thread string) *builder {
	dir := t.TempDir()
	path := filepath.Join(dir, thread+".rollout")
	w, err := rollout.Create(ctx, path, rollout.ThreadOpened{ThreadID: thread, WorkspaceID: fxWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}},
		rollout.Options{Sync: rollout.SyncAlways, CompressAbove: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &builder{t: t, w: w, path: path, frames: map[string]frameRef{"header": {rollout.FileHeaderSize, w.End()}}}
}

func (b *builder) rec(kind rollout.Kind, turn string, body any) rollout.Record {
	r, err := rollout.NewRecord(kind, turn, body)
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

func (b *builder) item(turn string, typ rollout.ItemType, callID string) rollout.Record {
	b.items++
	return b.rec(rollout.KindItemAppended, turn, rollout.Item{ID: fmt.Sprintf("%s-i%d", turn, b.items), Type: typ, Status: rollout.ItemCompleted, CallID: callID, Name: "shell", Text: fmt.Sprintf("text of item %d", b.items)})
}

func (b *builder) frame(name string, recs ...rollout.Record) {
	res, err := b.w.Append(ctx, recs, rollout.AppendOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	b.frames[name] = frameRef{res.Offset, res.End}
}

// turn writes turn u<n>: start + user message; a streamed reasoning item;
// a tool call; then the commit (tool result, agent message, exact history,
// optional checkpoint, turn_completed). With separateHistory the exact
// history is its own frame before the commit (as a host streaming it
// mid-turn would write it).
func (b *builder) turn(checkpoint *rollout.Checkpoint, separateHistory bool) string {
	b.turns++
	id := fmt.Sprintf("u%d", b.turns)
	b.frame(id+"/start", b.rec(rollout.KindTurnStarted, id, rollout.TurnStarted{}), b.item(id, rollout.ItemUserMessage, ""))
	b.frame(id+"/reasoning", b.item(id, rollout.ItemReasoning, ""))
	b.frame(id+"/call", b.item(id, rollout.ItemToolCall, "c-"+id))
	hist := b.rec(rollout.KindModelHistoryAppended, id, rollout.ModelHistory{Messages: [][]byte{[]byte(`{"exact":"` + id + `"}`)}})
	commit := []rollout.Record{b.item(id, rollout.ItemToolResult, "c-"+id), b.item(id, rollout.ItemAgentMessage, "")}
	if separateHistory {
		b.frame(id+"/history", hist)
	} else {
		commit = append(commit, hist)
	}
	if checkpoint != nil {
		cp := *checkpoint
		cp.CoveredTurn, cp.Trigger = id, rollout.TriggerPostTurn
		cp.ReplacementHistory = [][]byte{[]byte(`{"summary through":"` + id + `"}`)}
		commit = append(commit, b.rec(rollout.KindCheckpoint, id, cp))
	}
	commit = append(commit, b.rec(rollout.KindTurnCompleted, id, rollout.TurnCompleted{Status: rollout.TurnStatusCompleted}))
	b.frame(id+"/commit", commit...)
	return id
}

func (b *builder) bytes() []byte {
	if err := b.w.Close(); err != nil {
		b.t.Fatal(err)
	}
	data, err := os.ReadFile(b.path)
	if err != nil {
		b.t.Fatal(err)
	}
	return data
}

func flipAt(b []byte, off int64) []byte {
	c := append([]byte(nil), b...)
	c[off] ^= 0x08
	return c
}

func payload(f frameRef) int64 { return f.off + rollout.FrameHeaderSize }

type fixture struct {
	data []byte
	want expectation
}

func six(b *builder) {
	for i := 1; i <= 6; i++ {
		var cp *rollout.Checkpoint
		if i == 3 || i == 6 {
			cp = &rollout.Checkpoint{ID: fmt.Sprintf("cp%d", i), TokensBefore: 1000, TokensAfter: 100}
		}
		b.turn(cp, false)
	}
}

var all6 = []string{"u1", "u2", "u3", "u4", "u5", "u6"}

func makeRecoveryFixtures(t testing.TB) map[string]fixture {
	fx := map[string]fixture{}
	ok := func(desc string) expectation {
		return expectation{Description: desc, Turns: all6, Interrupted: []string{}, Rebuilt: []string{}, Checkpoint: "u6", PassedOver: []string{}, Skipped: []string{}}
	}

	b := newBuilder(t, fxThread)
	six(b)
	clean := b.bytes()
	last := b.frames["u6/commit"]
	{
		e := ok("the last frame (u6's commit) cut inside its header: u6 is interrupted, the checkpoint in it is gone")
		e.Interrupted, e.Checkpoint, e.TornTail, e.LostItems = []string{"u6"}, "u3", true, 2
		fx["rec-torn-tail-mid-header"] = fixture{clean[:last.off+17], e}
		e.Description = "the last frame (u6's commit) cut inside its payload"
		fx["rec-torn-tail-mid-payload"] = fixture{clean[:last.end-9], e}
	}
	{
		e := ok("a bit flipped in a streamed item (u2's reasoning): the item is lost, u2 keeps its exact history")
		e.Skipped, e.LostItems = []string{"payload_checksum"}, 1
		fx["rec-item-bitflip"] = fixture{flipAt(clean, payload(b.frames["u2/reasoning"])+5), e}
	}
	{
		e := ok("zeros over a middle frame (u4's tool call): the item is lost, u4 keeps its exact history")
		e.Skipped, e.LostItems = []string{"zeros"}, 1
		c := append([]byte(nil), clean...)
		f := b.frames["u4/call"]
		clear(c[f.off:f.end])
		fx["rec-zero-filled-gap"] = fixture{c, e}
	}
	{
		e := expectation{Description: "a bit flipped in the header record: resume refuses", Error: "no_header"}
		fx["rec-header-damaged"] = fixture{flipAt(clean, payload(b.frames["header"])+12), e}
		e.Description = "only the file header: no thread header record, resume refuses"
		fx["rec-file-header-only"] = fixture{clean[:rollout.FileHeaderSize], e}
	}

	// u6's commit (with its checkpoint) damaged mid-file: a seventh turn
	// follows, so it is not a torn tail.
	b7 := newBuilder(t, fxThread)
	six(b7)
	b7.turn(nil, false)
	{
		e := ok("a bit flipped in the commit frame holding u6's checkpoint: u6 is interrupted and rebuilt from items, the older checkpoint (u3) is used")
		e.Turns = append(append([]string{}, all6...), "u7")
		e.Skipped, e.Interrupted, e.Rebuilt, e.Checkpoint, e.LostItems = []string{"payload_checksum"}, []string{"u6"}, []string{"u6"}, "u3", 2
		data := b7.bytes()
		fx["rec-checkpoint-bitflip"] = fixture{flipAt(data, payload(b7.frames["u6/commit"])+40), e}
	}

	// Exact history in its own frame, so that it alone can be damaged.
	b = newBuilder(t, fxThread)
	b.turn(nil, true)
	b.turn(nil, true)
	b.turn(nil, true)
	sep := b.bytes()
	sepFrames := b.frames
	{
		e := expectation{Description: "a bit flipped in u2's exact-history record: u2 is rebuilt from its items", Turns: []string{"u1", "u2", "u3"},
			Interrupted: []string{}, Rebuilt: []string{"u2"}, PassedOver: []string{}, Skipped: []string{"payload_checksum"}}
		fx["rec-history-bitflip"] = fixture{flipAt(sep, payload(sepFrames["u2/history"])+10), e}

		// Another thread's exact-history frame in place of u2's.
		o := newBuilder(t, "other")
		o.turn(nil, true)
		o.turn(nil, true)
		other := o.bytes()
		of := o.frames["u2/history"]
		f := sepFrames["u2/history"]
		spliced := append(append(append([]byte(nil), sep[:f.off]...), other[of.off:of.end]...), sep[f.end:]...)
		e.Description = "u2's exact-history frame replaced by one from another thread's rollout: u2 is rebuilt from its items"
		e.Skipped = []string{"file_id"}
		fx["rec-history-from-other-thread"] = fixture{spliced, e}
	}

	// Rollback past the latest checkpoint.
	b = newBuilder(t, fxThread)
	six(b)
	b.frame("rollback", b.rec(rollout.KindThreadRolledBack, "", rollout.ThreadRolledBack{Turns: 2}))
	{
		e := ok("a rollback of two turns drops u5 and u6 and with it u6's checkpoint: u3's is used")
		e.Turns, e.Checkpoint, e.PassedOver = all6[:4], "u3", []string{"covered turn does not survive"}
		fx["rec-rollback-past-checkpoint"] = fixture{b.bytes(), e}
	}

	// An undecodable checkpoint body (the frame checks): passed over.
	b = newBuilder(t, fxThread)
	six(b)
	b.frame("bad-checkpoint", rollout.Record{Kind: rollout.KindCheckpoint, Body: []byte{0xc1}})
	{
		e := ok("a manual checkpoint whose body does not decode: passed over, u6's is used")
		e.PassedOver, e.Skipped = []string{"undecodable"}, []string{"undecodable_body"}
		fx["rec-checkpoint-undecodable"] = fixture{b.bytes(), e}
	}

	// A record kind from a newer writer.
	b = newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("future", rollout.Record{Kind: "goal_updated_v9", Turn: "u1", Body: []byte{0x81, 0xa1, 'g', 0xa3, 'w', 'i', 'n'}})
	b.turn(nil, false)
	{
		e := expectation{Description: "a record of a kind from a newer version: kept in the file, skipped with a diagnostic", Turns: []string{"u1", "u2"},
			Interrupted: []string{}, Rebuilt: []string{}, PassedOver: []string{}, Skipped: []string{"unknown_kind"}}
		fx["rec-unknown-kind"] = fixture{b.bytes(), e}
	}

	// A second header with another identity.
	b = newBuilder(t, fxThread)
	b.turn(nil, false)
	b.frame("second-header", b.rec(rollout.KindThreadOpened, "", rollout.ThreadOpened{ThreadID: "intruder", WorkspaceID: fxWorkspace, Source: rollout.Source{Kind: rollout.SourceUser}}))
	b.turn(nil, false)
	fx["rec-second-header-other-thread"] = fixture{b.bytes(), expectation{Description: "a second header naming another thread: resume refuses", Error: "identity_conflict"}}
	return fx
}

func TestRecoveryFixtures(t *testing.T) {
	if *updateFixtures {
		for name, f := range makeRecoveryFixtures(t) {
			js, _ := json.MarshalIndent(f.want, "", "  ")
			if err := os.WriteFile(filepath.Join(fixtureDir, name+".rollout"), f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(fixtureDir, name+".json"), append(js, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	paths, _ := filepath.Glob(filepath.Join(fixtureDir, "rec-*.rollout"))
	sort.Strings(paths)
	if len(paths) < len(makeRecoveryFixtures(t)) {
		t.Fatalf("%d recovery fixtures in %s; regenerate with -update-fixtures", len(paths), fixtureDir)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".rollout")
		t.Run(name, func(t *testing.T) {
			data, _ := os.ReadFile(p)
			js, err := os.ReadFile(strings.TrimSuffix(p, ".rollout") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var want expectation
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			checkResume(t, data, want)
		})
	}
}

// checkResume resumes data and compares with want.
func checkResume(t *testing.T, data []byte, want expectation) {
	t.Helper()
	st, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, WorkspaceID: fxWorkspace})
	// CheckIdentity (verify's check, no state built) says what Resume says.
	cerr := CheckIdentity(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, WorkspaceID: fxWorkspace})
	if fmt.Sprint(cerr) != fmt.Sprint(err) {
		t.Fatalf("%s: CheckIdentity says %v, Resume %v", want.Description, cerr, err)
	}
	if want.Error != "" {
		if !errors.Is(err, identityNames[want.Error]) || !errors.Is(err, ErrIdentity) || st != nil {
			t.Fatalf("%s: got %v, want %s", want.Description, err, want.Error)
		}
		// The standard library's errors.Is too (a host need not use
		// cockroachdb/errors).
		if !stderrors.Is(err, identityNames[want.Error]) || !stderrors.Is(err, ErrIdentity) {
			t.Fatalf("%s: the standard errors.Is does not see %s in %v", want.Description, want.Error, err)
		}
		if len(errors.GetAllHints(err)) == 0 {
			t.Fatalf("identity error without a hint: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", want.Description, err)
	}
	got := expectation{Description: want.Description, Turns: []string{}, Interrupted: []string{}, Rebuilt: []string{}, PassedOver: []string{}, Skipped: []string{}, TornTail: st.Report.TornTail}
	items := 0
	for _, tu := range st.Turns {
		got.Turns = append(got.Turns, tu.ID)
		items += len(tu.Items)
	}
	got.Interrupted = append(got.Interrupted, st.Interrupted...)
	got.Rebuilt = append(got.Rebuilt, st.Report.RebuiltTurns...)
	if c := st.Report.Checkpoint; c != nil {
		got.Checkpoint = c.CoveredTurn
	}
	for _, p := range st.Report.PassedOver {
		got.PassedOver = append(got.PassedOver, p.Why)
	}
	for _, s := range st.Report.Skipped {
		got.Skipped = append(got.Skipped, s.Reason)
	}
	got.LostItems = 5*len(st.Turns) - items
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("\n got  %s\n want %s", g, w)
	}
	// The model history: the checkpoint's replacement, then each later
	// turn's exact history or, for rebuilt turns, history from items.
	checkHistory(t, st)
	// Located, and read back a turn at a time, with and without the
	// checkpoint.
	checkLocated(t, data, Options{ThreadID: fxThread, WorkspaceID: fxWorkspace}, st)
	all, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, WorkspaceID: fxWorkspace, IgnoreCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	checkLocated(t, data, Options{ThreadID: fxThread, WorkspaceID: fxWorkspace, IgnoreCheckpoints: true}, all)
	// Without the history (an export), the same turns and report.
	lean, err := Resume(ctx, bytes.NewReader(data), int64(len(data)), Options{ThreadID: fxThread, WorkspaceID: fxWorkspace, SkipHistory: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(lean.ModelHistory) != 0 {
		t.Fatalf("%s: SkipHistory kept %d messages", want.Description, len(lean.ModelHistory))
	}
	for _, tu := range st.Turns {
		tu.History = nil
	}
	asJSON := func(v ...any) string { b, _ := json.Marshal(v); return string(b) }
	if a, b := asJSON(lean.Report, lean.Interrupted, lean.Metadata), asJSON(st.Report, st.Interrupted, st.Metadata); a != b {
		t.Fatalf("%s: SkipHistory changed the report:\n%s\n%s", want.Description, a, b)
	}
	for i, tu := range lean.Turns {
		if a, b := asJSON(tu), asJSON(st.Turns[i]); a != b {
			t.Fatalf("%s: SkipHistory changed turn %d:\n%s\n%s", want.Description, i, a, b)
		}
	}
}

func checkHistory(t *testing.T, st *State) {
	t.Helper()
	var want [][]byte
	from := 0
	if c := st.Report.Checkpoint; c != nil {
		want = append(want, []byte(`{"summary through":"`+c.CoveredTurn+`"}`))
		for i, tu := range st.Turns {
			if tu.ID == c.CoveredTurn {
				from = i + 1
			}
		}
	}
	for _, tu := range st.Turns[from:] {
		switch tu.HistorySource {
		case HistoryExact:
			want = append(want, []byte(`{"exact":"`+tu.ID+`"}`))
		default:
			want = append(want, DefaultHistory(tu.ID, tu.Items)...)
			for _, m := range tu.History {
				if bytes.Contains(m, []byte(`"exact"`)) {
					t.Fatalf("turn %s mixes exact history into its rebuilt history", tu.ID)
				}
			}
		}
	}
	if len(want) != len(st.ModelHistory) {
		t.Fatalf("model history has %d messages, want %d", len(st.ModelHistory), len(want))
	}
	for i := range want {
		if !bytes.Equal(want[i], st.ModelHistory[i]) {
			t.Fatalf("model history[%d] = %s, want %s", i, st.ModelHistory[i], want[i])
		}
	}
}

func globFixtures() ([]string, error) {
	return filepath.Glob(filepath.Join(fixtureDir, "*.rollout"))
}
