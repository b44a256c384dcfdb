package rolloutdb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
)

// urls are workspaces and backups written as URLs this build does not
// serve (postgres:// is the fleet engine's, as a workspace).
var urls = []struct{ url, scheme string }{
	{"s3://bucket/x", "s3"},
	{"gs://b", "gs"},
	{"file:///tmp/w", "file"},
}

// inEmptyDir runs the test in a new empty directory, and says what it
// holds at the end: a URL taken for a relative path makes its scheme's
// directory ("s3:") there.
func inEmptyDir(t *testing.T) func() []string {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	return func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
}

func wantURLError(t *testing.T, err error, what, url, scheme string) {
	t.Helper()
	if !errors.Is(err, rolloutdb.ErrUnsupportedURL) {
		t.Fatalf("%s %s: %v; want ErrUnsupportedURL", what, url, err)
	}
	want := what + " \"" + url + "\" is a URL of scheme " + scheme + ", which this build does not serve"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s %s: %q; want it to say %q", what, url, err, want)
	}
}

func TestOpenRefusesAURLAndMakesNothing(t *testing.T) {
	made := inEmptyDir(t)
	for _, u := range urls {
		db, err := rolloutdb.Open(ctx, u.url, rolloutdb.Options{})
		if err == nil {
			db.Close()
		}
		wantURLError(t, err, "workspace", u.url, u.scheme)
	}
	if m := made(); len(m) != 0 {
		t.Fatalf("Open of URLs made %q", m)
	}
	// A directory named so, written as a relative path, is a workspace.
	db, err := rolloutdb.Open(ctx, "./s3://bucket/x", rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("s3:", "bucket", "x", ".craft", "workspace.json")); err != nil {
		t.Fatal(err)
	}
}

// A postgres:// workspace is a fleet's: one that cannot be reached is
// ErrUnavailable, and nothing is made on the local disk.
func TestOpenOfAnUnreachableFleetMakesNothing(t *testing.T) {
	made := inEmptyDir(t)
	_, err := rolloutdb.Open(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable", rolloutdb.Options{Fleet: rolloutdb.FleetOptions{CommitTimeout: 500 * time.Millisecond}})
	if !errors.Is(err, rolloutdb.ErrUnavailable) {
		t.Fatalf("open of an unreachable fleet: %v", err)
	}
	if m := made(); len(m) != 0 {
		t.Fatalf("Open of a fleet DSN made %q", m)
	}
}

func TestBackupRefusesAURLAndMakesNothing(t *testing.T) {
	ws := t.TempDir()
	db, err := rolloutdb.Open(ctx, ws, rolloutdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	backupDir := t.TempDir()
	if _, err := db.Backup(ctx, backupDir, rolloutdb.BackupOptions{}); err != nil {
		t.Fatal(err)
	}
	made := inEmptyDir(t)
	for _, u := range urls {
		_, err := db.Backup(ctx, u.url, rolloutdb.BackupOptions{})
		wantURLError(t, err, "backup destination", u.url, u.scheme)
		_, err = rolloutdb.VerifyBackup(u.url, "")
		wantURLError(t, err, "backup", u.url, u.scheme)
		_, err = rolloutdb.RestoreBackup(ctx, u.url, filepath.Join(t.TempDir(), "w"), "")
		wantURLError(t, err, "backup", u.url, u.scheme)
		_, err = rolloutdb.RestoreBackup(ctx, backupDir, u.url, "")
		wantURLError(t, err, "workspace", u.url, u.scheme)
	}
	if m := made(); len(m) != 0 {
		t.Fatalf("backups to URLs made %q", m)
	}
}
