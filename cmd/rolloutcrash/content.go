package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// A record is known by a key: a digest of its kind, turn and body in a
// canonical form that both sides compute the same way. The writer computes
// it from the values it hands the library; the checker from the record it
// decodes from disk. Every record the workload writes is unique in its
// thread (ids and texts carry the op that wrote them), so a key names one
// record, and a record found on disk whose key no writer announced was
// never written by anyone.

// canonItem is an item with its text replaced by a digest of the full text:
// a tool result the library spilled to an artifact keeps only a preview and
// a reference in the record, and the checker reads the artifact back to
// compute the same digest.
type canonItem struct {
	ID        string            `json:"id"`
	Type      rollout.ItemType  `json:"type"`
	Status    string            `json:"status"`
	Text      string            `json:"text_sha256"`
	Len       int               `json:"text_len"`
	CallID    string            `json:"call_id,omitempty"`
	Name      string            `json:"name,omitempty"`
	Arguments string            `json:"arguments,omitempty"`
	Data      map[string]string `json:"data,omitempty"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func canonicalItem(it rollout.Item, full []byte) canonItem {
	id := it.ID
	if it.Type == rollout.ItemUserMessage {
		// The user message of TurnOptions.Input gets its id from the
		// library; its text is unique already.
		id = ""
	}
	return canonItem{ID: id, Type: it.Type, Status: it.Status, Text: digest(full), Len: len(full),
		CallID: it.CallID, Name: it.Name, Arguments: it.Arguments, Data: it.Data}
}

// recordKey is the key of a record of kind in turn with body (a value of
// the kind's body type, or a canonItem).
func recordKey(kind rollout.Kind, turn string, body any) string {
	b, err := json.Marshal(struct {
		K rollout.Kind `json:"k"`
		T string       `json:"t"`
		B any          `json:"b"`
	}{kind, turn, body})
	if err != nil {
		panic(err) // bodies are plain structs
	}
	return digest(b)[:24]
}

// chained kinds have bodies that repeat (a rollback of one turn is like
// every other): their key also covers the key of the record before them in
// their frame, and the workload never writes one first in a frame.
func chained(kind rollout.Kind) bool { return kind == rollout.KindThreadRolledBack }

// chainKey is the key of a record of a chained kind after prev in its
// frame.
func chainKey(kind rollout.Kind, turn string, body any, prev string) string {
	return recordKey(kind, turn, struct {
		B    any    `json:"b"`
		Prev string `json:"prev"`
	}{body, prev})
}

// keyReader computes the keys of the records of a rollout as a reader
// yields them (chained kinds need the record before them in the frame).
type keyReader struct {
	fs       vfs.FS // the workspace's file system (nil: the OS's)
	dataDir  string
	frame    int64
	prev     string
	hasFrame bool
}

func (k *keyReader) key(rec rollout.Record, frameOffset int64) (string, error) {
	if !k.hasFrame || frameOffset != k.frame {
		k.frame, k.prev, k.hasFrame = frameOffset, "", true
	}
	key, err := diskKey(rec, k.fs, k.dataDir)
	if err == nil && chained(rec.Kind) {
		key = chainKey(rec.Kind, rec.Turn, struct{}{}, k.prev+"/"+key)
	}
	k.prev = key
	return key, err
}

// itemKey is the key of an item record as the writer hands it over.
func itemKey(turn string, it rollout.Item) string {
	return recordKey(rollout.KindItemAppended, turn, canonicalItem(it, []byte(it.Text)))
}

// diskKey computes the key of a record read from a rollout. dataDir, on
// fsys, resolves artifact references.
func diskKey(rec rollout.Record, fsys vfs.FS, dataDir string) (string, error) {
	v, err := rec.DecodeBody()
	if err != nil {
		return "", err
	}
	var body any
	switch b := v.(type) {
	case *rollout.Item:
		full := []byte(b.Text)
		if b.Ref != nil {
			if full, err = readArtifact(fsys, dataDir, *b.Ref); err != nil {
				return "", err
			}
		}
		body = canonicalItem(*b, full)
	case *rollout.TurnStarted:
		body = *b
	case *rollout.TurnCompleted:
		body = *b
	case *rollout.TurnAborted:
		body = *b
	case *rollout.ModelHistory:
		body = *b
	case *rollout.Checkpoint:
		body = *b
	case *rollout.MetadataUpdated:
		body = *b
	case *rollout.ThreadRolledBack:
		body = *b
	default:
		return "", errors.Newf("record kind %s is never written by the workload", rec.Kind)
	}
	return recordKey(rec.Kind, rec.Turn, body), nil
}

// readArtifact reads a spilled tool output (on fsys: a MemFS workspace's
// artifacts are in its MemFS; nil is the OS's) and checks it against its
// reference.
func readArtifact(fsys vfs.FS, dataDir string, ref rollout.ArtifactRef) ([]byte, error) {
	if dataDir == "" {
		return nil, errors.Newf("artifact reference %s in a workspace without artifacts", ref.Path)
	}
	if fsys == nil {
		fsys = vfs.OS
	}
	p, err := rollout.SafeJoin(dataDir, ref.Path)
	if err != nil {
		return nil, err
	}
	b, err := vfs.ReadFile(fsys, p, ref.Size)
	if err != nil {
		return nil, errors.Wrapf(err, "artifact %s of an acknowledged-or-attempted record", ref.Path)
	}
	if int64(len(b)) != ref.Size || digest(b) != ref.SHA256 {
		return nil, errors.Newf("artifact %s: %d bytes, sha256 %s; the record says %d bytes, %s", ref.Path, len(b), digest(b), ref.Size, ref.SHA256)
	}
	return b, nil
}

// gen makes realistic content: mostly short texts, some code-sized ones,
// and occasionally a large one (compressible or not) that spills or makes
// a compressed frame.
type gen struct {
	rng *rand.Rand
	// large is the probability of a large text.
	large float64
}

var words = strings.Fields(`the a to of and in is it for that on with this as be are not func return err nil if
	file test build error value thread turn item rollout frame commit sync fsync write read open close
	panic map slice string int context package import go run fix bug line offset seq record checkpoint`)

func (g *gen) words(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.rng.IntN(len(words))])
	}
	return b.String()
}

// text returns a text of a random size class, starting with tag so that it
// is unique.
func (g *gen) text(tag string) string {
	switch r := g.rng.Float64(); {
	case r < g.large:
		return g.big(tag, 40<<10+g.rng.IntN(300<<10))
	case r < g.large+0.15:
		return g.code(tag, 1<<10+g.rng.IntN(7<<10))
	default:
		return tag + ": " + g.words(2+g.rng.IntN(40))
	}
}

// code is line-oriented text of about n bytes: compresses well.
func (g *gen) code(tag string, n int) string {
	var b strings.Builder
	b.WriteString(tag)
	b.WriteByte('\n')
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%4d\t%s\n", i, g.words(3+g.rng.IntN(10)))
	}
	return b.String()
}

// big is a large text: half the time random (incompressible) bytes in
// printable form, otherwise code.
func (g *gen) big(tag string, n int) string {
	if g.rng.IntN(2) == 0 {
		return g.code(tag, n)
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/\n"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.rng.IntN(len(alphabet))]
	}
	return tag + "\n" + string(b)
}
