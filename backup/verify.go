package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/vfs"
)

// VerifyOptions say where a backup is. The zero value works.
type VerifyOptions struct {
	// DataDir is the name of the backup's data directory. Default:
	// ".craft".
	DataDir string
	// FS is the file system the backup is on. Default: vfs.OS.
	FS vfs.FS
}

// Verify reads every file a backup's manifest lists and checks its
// size and digest; it returns the files that do not match (none: the
// backup is as it was written).
func Verify(dest string, o VerifyOptions) (bad []string, err error) {
	if o.DataDir == "" {
		o.DataDir = ".craft"
	}
	fsys := fsOf(o.FS)
	data := filepath.Join(dest, o.DataDir)
	m, err := loadManifest(fsys, data)
	if err != nil {
		return nil, errors.Wrapf(ErrNotABackup, "%s: %v", dest, err)
	}
	for _, f := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			bad = append(bad, f.Path+": leaves the backup")
			continue
		}
		if why := checkFile(fsys, data, f); why != "" {
			bad = append(bad, f.Path+": "+why)
		}
	}
	return bad, nil
}

// loadManifest reads the manifest in the data directory data.
func loadManifest(fsys vfs.FS, data string) (*Manifest, error) {
	b, err := vfs.ReadFile(fsys, filepath.Join(data, ManifestName), maxManifest)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.Wrap(err, "manifest")
	}
	return &m, nil
}

// checkFile says why the copy of f in data does not match it ("" if it
// does).
func checkFile(fsys vfs.FS, data string, f File) string {
	path := filepath.Join(data, filepath.FromSlash(f.Path))
	size, err := fsys.Stat(path)
	if err != nil {
		return err.Error()
	}
	sum, err := fileDigest(fsys, path)
	if err != nil || size != f.Size || sum != f.SHA256 {
		why := "size or digest differs"
		if strings.HasSuffix(f.Path, ".db") && !strings.Contains(f.Path, "/") {
			why += " (opening the backup as a workspace changes its SQLite files)"
		}
		return why
	}
	return ""
}

// fileDigest is the SHA-256 of the file at path, in hex.
func fileDigest(fsys vfs.FS, path string) (string, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	buf := make([]byte, min(1<<20, size))
	for off := int64(0); off < size; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		h.Write(buf[:n])
		off += int64(n)
		if off < size && (n == 0 || err != nil) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF // shrunk while read
			}
			return "", errors.Wrapf(err, "digest %s", path)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
