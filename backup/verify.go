package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
)

// Verify reads every file a backup's manifest lists and checks its
// size and digest; it returns the files that do not match (none: the
// backup is as it was written).
func Verify(dest string, dataDir string) (bad []string, err error) {
	if dataDir == "" {
		dataDir = ".craft"
	}
	data := filepath.Join(dest, dataDir)
	b, err := os.ReadFile(filepath.Join(data, ManifestName))
	if err != nil {
		return nil, errors.Wrapf(ErrNotABackup, "%s: %v", dest, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.Wrapf(ErrNotABackup, "%s: manifest: %v", dest, err)
	}
	for _, f := range m.Files {
		path := filepath.Join(data, filepath.FromSlash(f.Path))
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			bad = append(bad, f.Path+": leaves the backup")
			continue
		}
		st, err := os.Stat(path)
		if err != nil {
			bad = append(bad, f.Path+": "+err.Error())
			continue
		}
		sum, err := fileDigest(path)
		if err != nil || st.Size() != f.Size || sum != f.SHA256 {
			why := ": size or digest differs"
			if strings.HasSuffix(f.Path, ".db") && !strings.Contains(f.Path, "/") {
				why += " (opening the backup as a workspace changes its SQLite files)"
			}
			bad = append(bad, f.Path+why)
		}
	}
	return bad, nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", errors.Wrapf(err, "digest %s", path)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.CombineErrors(err, f.Close())
}
