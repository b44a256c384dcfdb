package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"path"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
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
// backup is as it was written). A copy replaced by a backup interrupted
// since the manifest is checked where that backup kept it (see the
// package doc). ErrNotABackup if dest holds no manifest, or one that does
// not decode.
func Verify(dest string, o VerifyOptions) (bad []string, err error) {
	if o.DataDir == "" {
		o.DataDir = ".craft"
	}
	fsys := fsOf(o.FS)
	data := filepath.Join(dest, o.DataDir)
	m, err := loadManifest(fsys, dest, data)
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			bad = append(bad, f.Path+": leaves the backup")
			continue
		}
		if _, err := checkFile(fsys, data, f); err != nil {
			why := err.Error()
			if errors.Is(err, errDiffers) && isSQLite(f.Path) {
				why += " (opening the backup as a workspace changes its SQLite files)"
			}
			bad = append(bad, f.Path+": "+why)
		}
	}
	return bad, nil
}

// loadManifest reads the manifest of the backup in dest (data directory
// data): ErrNotABackup if there is none or it does not decode, the cause
// if it cannot be read (a failing disk is not told apart from a backup
// that is not one by an errors.Is).
func loadManifest(fsys vfs.FS, dest, data string) (*Manifest, error) {
	b, err := vfs.ReadFile(fsys, filepath.Join(data, ManifestName), maxManifest)
	if vfs.IsNotExist(err) {
		return nil, errors.Wrapf(ErrNotABackup, "%s: %v", dest, err)
	}
	if err != nil {
		return nil, errors.Wrapf(err, "backup: read the manifest of %s", dest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, errors.Wrapf(ErrNotABackup, "%s: manifest: %v", dest, err)
	}
	return &m, nil
}

// prevSuffix names where a run keeps a copy the previous manifest names
// while it replaces the copy whole, until its own manifest is durable.
const prevSuffix = ".backup-prev"

// errDiffers says that a file was read and is not the one the manifest
// names.
var errDiffers = errors.New("size or digest differs")

// checkFile returns the file in the backup in data that holds f: its
// copy, or the one a run interrupted since that manifest kept
// (prevSuffix). Else it returns why the copy does not hold it: errDiffers,
// fs.ErrNotExist, or what failed reading it.
func checkFile(fsys vfs.FS, data string, f File) (string, error) {
	path := filepath.Join(data, filepath.FromSlash(f.Path))
	err := mismatch(fsys, path, f)
	if err == nil {
		return path, nil
	}
	if mismatch(fsys, path+prevSuffix, f) == nil {
		return path + prevSuffix, nil
	}
	return "", err
}

// isSQLite reports whether rel is one of the SQLite files of the data
// directory, which opening the backup as a workspace changes.
func isSQLite(rel string) bool { return strings.HasSuffix(rel, ".db") && !strings.Contains(rel, "/") }

// mismatch says why the file at path does not hold f (nil if it does):
// its size and digest. A rollout's copy may go on past f.Size (a run
// appended to it and was interrupted before its manifest): it holds f if
// its first f.Size bytes do.
func mismatch(fsys vfs.FS, path string, f File) error {
	size, err := fsys.Stat(path)
	if err != nil {
		return err
	}
	if size != f.Size && !(size > f.Size && appendOnly(f.Path)) {
		return errDiffers
	}
	sum, err := digest(fsys, path, f.Size)
	if err != nil {
		return err
	}
	if sum != f.SHA256 {
		return errDiffers
	}
	return nil
}

// appendOnly reports whether the copy at rel, in the data directory, is a
// rollout's that later runs append to in place.
func appendOnly(rel string) bool {
	dir, name := path.Split(rel)
	return (dir == rollout.ActiveDir+"/" || dir == rollout.ArchivedDir+"/") && strings.HasSuffix(name, rollout.RolloutExt)
}

// fileDigest is the SHA-256 of the file at path, in hex.
func fileDigest(fsys vfs.FS, path string) (string, error) { return digest(fsys, path, -1) }

// digest is the SHA-256 of the first n bytes of the file at path (all of
// it if n < 0), in hex.
func digest(fsys vfs.FS, path string, n int64) (string, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return "", err
	}
	if n >= 0 {
		size = min(size, n)
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
