package rollout

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// MaxThreadIDLen bounds a thread id. It also bounds the id stored in the
// file header.
const MaxThreadIDLen = 64

// ValidateThreadID checks a thread id before it touches a path: 1 to 64
// characters of lower-case ASCII letters, digits, '-' and '_', starting with
// a letter or digit. Ids are never rewritten or hashed: anything else is
// rejected. Lower case only, so two ids cannot name one file on a
// case-insensitive file system.
func ValidateThreadID(id string) error {
	if len(id) == 0 || len(id) > MaxThreadIDLen {
		return errors.WithHint(
			errors.Wrapf(ErrInvalidThreadID, "%q: length %d, want 1..%d", truncateForError(id), len(id), MaxThreadIDLen),
			"thread ids are 1-64 characters of a-z, 0-9, '-' and '_'")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '-' || c == '_'))
		if !ok {
			return errors.WithHint(
				errors.Wrapf(ErrInvalidThreadID, "%q: character %q at %d", truncateForError(id), c, i),
				"thread ids are 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit")
		}
	}
	return nil
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

var idMu struct {
	sync.Mutex
	lastMS int64
	seq    uint16
}

// NewID returns a new time-ordered id in the form of a UUIDv7
// ("0190f5e4-6a3b-7c21-8d4e-1f2a3b4c5d6e"): ids made later in this process
// sort after ids made earlier, across clock steps backwards too. It is used
// for thread, turn and item ids.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[6:]); err != nil {
		panic("rollout: crypto/rand failed: " + err.Error()) // crypto/rand does not fail on supported platforms
	}
	idMu.Lock()
	ms := time.Now().UnixMilli()
	if ms <= idMu.lastMS {
		// Same millisecond (or the clock stepped back): keep order with a
		// counter in the 12 "rand_a" bits.
		ms = idMu.lastMS
		idMu.seq++
		if idMu.seq >= 1<<12 {
			ms++
			idMu.seq = 0
		}
	} else {
		idMu.seq = 0
	}
	idMu.lastMS = ms
	seq := idMu.seq
	idMu.Unlock()

	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(ms))
	copy(b[0:6], t[2:8])
	b[6] = 0x70 | byte(seq>>8)&0x0f
	b[7] = byte(seq)
	b[8] = 0x80 | b[8]&0x3f
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}
