package artifacts

import (
	"fmt"
	"path/filepath"
)

// PutAttachment stores attachment bytes by content: the same bytes are
// stored once however often they are attached. GC removes them once no
// surviving record references them.
func (s *Store) PutAttachment(b []byte) (Ref, error) {
	if int64(len(b)) > s.opts.MaxArtifact {
		return Ref{}, fmt.Errorf("%w: attachment of %d bytes (limit %d)", ErrTooLarge, len(b), s.opts.MaxArtifact)
	}
	sum := digest(b)
	path, err := s.createNew(filepath.Join(s.root, AttachmentsDir, sum[:2]), sum, "", b)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Path: s.rel(path), Size: int64(len(b)), SHA256: sum}, nil
}
