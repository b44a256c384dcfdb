package rollout

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The damaged rollouts in ../testdata/corrupt/ are made here, from clean
// rollouts written by the writer, each with an expectation file saying what
// the reader must report. They seed the fuzz targets. When the format
// changes, regenerate them:
//
//	go test ./rollout -run TestCorruptFixtures -update-fixtures
//
// (The recovery package adds fixtures of its own, with expectations about
// resume, beside these.)
var updateFixtures = flag.Bool("update-fixtures", false, "rewrite testdata/corrupt/ format fixtures")

const fixtureDir = "../testdata/corrupt"

// fixtureExpect is what reading a fixture must give.
type fixtureExpect struct {
	Description string          `json:"description"`
	Seqs        []uint64        `json:"seqs"`   // records yielded, in order
	Damage      []fixtureDamage `json:"damage"` // mid-file damage
	TornTail    *fixtureDamage  `json:"torn_tail"`
	ZeroTail    int64           `json:"zero_tail"`
	Error       string          `json:"error,omitempty"` // NewReader fails with this reason
}

type fixtureDamage struct {
	Offset   int64  `json:"offset"`
	Length   int64  `json:"length"`
	Reason   string `json:"reason"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// makeFixtures builds every format fixture: name -> (bytes, description).
func makeFixtures(t *testing.T) map[string][2]string {
	_, data, fr := buildFile(t, 5, 2, -1)
	mid := fr[3]
	last := fr[len(fr)-1]
	zeroed := append([]byte(nil), data...)
	clear(zeroed[mid.off:mid.end])
	gap := append(append(append([]byte(nil), data[:mid.off]...), make([]byte, 512)...), data[mid.off:]...)
	return map[string][2]string{
		"fmt-torn-tail-mid-header.rollout":  {string(data[:last.off+20]), "the last frame cut inside its header"},
		"fmt-torn-tail-mid-payload.rollout": {string(data[:last.end-7]), "the last frame cut inside its payload"},
		"fmt-payload-bitflip.rollout":       {string(flip(data, mid.payloadOff+9)), "one bit flipped in a middle frame's payload"},
		"fmt-header-bitflip.rollout":        {string(flip(data, mid.off+13)), "one bit flipped in a middle frame's length field"},
		"fmt-zeroed-frame.rollout":          {string(zeroed), "a middle frame overwritten with zeros"},
		"fmt-zero-gap.rollout":              {string(gap), "512 zero bytes between two frames"},
		"fmt-zero-tail.rollout":             {string(append(append([]byte(nil), data...), make([]byte, 4096)...)), "4 KiB of zeros after the last frame"},
		"fmt-file-header-only.rollout":      {string(data[:FileHeaderSize]), "only the file header: an empty rollout"},
		"fmt-bad-file-header.rollout":       {string(flip(data, 20)), "a bit flipped in the file header: unreadable"},
	}
}

func readExpect(b []byte) fixtureExpect {
	e := fixtureExpect{Seqs: []uint64{}, Damage: []fixtureDamage{}}
	r, err := NewReader(bytes.NewReader(b), int64(len(b)), ReaderOptions{})
	if err != nil {
		var ce *CorruptionError
		if errorsAs(err, &ce) {
			e.Error = string(ce.Reason)
		} else {
			e.Error = err.Error()
		}
		return e
	}
	for r.Next() {
		e.Seqs = append(e.Seqs, r.Record().Seq)
	}
	for _, d := range r.Damage() {
		e.Damage = append(e.Damage, fixtureDamage{d.Offset, d.Length, string(d.Reason), d.FirstSeq, d.LastSeq})
	}
	if d := r.TornTail(); d != nil {
		e.TornTail = &fixtureDamage{d.Offset, d.Length, string(d.Reason), d.FirstSeq, d.LastSeq}
	}
	e.ZeroTail = r.ZeroTail()
	return e
}

func TestCorruptFixtures(t *testing.T) {
	if *updateFixtures {
		if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, fx := range makeFixtures(t) {
			b := []byte(fx[0])
			e := readExpect(b)
			e.Description = fx[1]
			js, _ := json.MarshalIndent(e, "", "  ")
			if err := os.WriteFile(filepath.Join(fixtureDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(fixtureDir, strings.TrimSuffix(name, RolloutExt)+".json"), append(js, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	paths, _ := filepath.Glob(filepath.Join(fixtureDir, "fmt-*.rollout"))
	sort.Strings(paths)
	if len(paths) < len(makeFixtures(t)) {
		t.Fatalf("%d format fixtures in %s; regenerate with -update-fixtures", len(paths), fixtureDir)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		js, err := os.ReadFile(strings.TrimSuffix(p, RolloutExt) + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var want fixtureExpect
		if err := json.Unmarshal(js, &want); err != nil {
			t.Fatal(err)
		}
		got := readExpect(b)
		got.Description = want.Description
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s (%s):\n got  %s\n want %s", filepath.Base(p), want.Description, g, w)
		}
	}
}
