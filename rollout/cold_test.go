package rollout

import (
	"bytes"
	"errors"
	"testing"
)

func TestColdRoundTripAndBombs(t *testing.T) {
	_, orig, _ := buildFile(t, 500, 3, 4096)
	c, err := CompressRollout(orig)
	if err != nil {
		t.Fatal(err)
	}
	if len(c) >= len(orig)/3 {
		t.Fatalf("compressed %d of %d bytes", len(c), len(orig))
	}
	back, err := DecompressRollout(c, 0)
	if err != nil || !bytes.Equal(back, orig) {
		t.Fatalf("round trip: %v", err)
	}
	// A small file that expands past the limit is refused, not expanded.
	bomb, _ := CompressRollout(append(bytes.Clone(orig[:FileHeaderSize]), make([]byte, 64<<20)...))
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb of %d bytes", len(bomb))
	}
	if _, err := DecompressRollout(bomb, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bomb: %v", err)
	}
	// Within the limit, but expanding more than MaxColdRatio times: no
	// rollout does that.
	if _, err := DecompressRollout(bomb, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("bomb within the limit: %v", err)
	}
	// Not a rollout at all: refused at its first bytes.
	zeros, _ := CompressRollout(make([]byte, 1<<20))
	var ce *CorruptionError
	if _, err := DecompressRollout(zeros, 0); !errors.As(err, &ce) || ce.Reason != ReasonBadFileHeader {
		t.Fatalf("zeros: %v", err)
	}
	if _, err := DecompressRollout([]byte("not zstd at all"), 0); !errors.As(err, &ce) {
		t.Fatalf("garbage: %v", err)
	}
	damaged := bytes.Clone(c)
	damaged[len(damaged)/2] ^= 0xff
	if _, err := DecompressRollout(damaged, 0); err == nil {
		t.Fatal("damaged compressed rollout decoded")
	}
}
