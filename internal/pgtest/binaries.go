package pgtest

import (
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"github.com/cockroachdb/errors"
)

// PreferredVersion is the major version Start uses when several are
// installed: the one the Makefile installs (Debian's postgresql-15).
const PreferredVersion = 15

// installRoot is where Debian's packages put each major version's
// programs, as installRoot/VERSION/bin.
const installRoot = "/usr/lib/postgresql"

// ErrNoPostgres is returned by Start when no PostgreSQL server programs
// are installed.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL server programs found")

// binaries are the programs a cluster runs.
type binaries struct {
	dir string
}

func (b binaries) path(name string) string { return filepath.Join(b.dir, name) }

// findBinaries returns the programs in dir, or else in the preferred
// version's directory under installRoot, or else in the highest version's.
func findBinaries(dir string) (binaries, error) {
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return binaries{}, errors.Wrapf(ErrNoPostgres, "Options.BinDir %s has no initdb", dir)
		}
		return binaries{dir: dir}, nil
	}
	dirs, _ := filepath.Glob(filepath.Join(installRoot, "*", "bin"))
	var versions []int
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		// The remedy is in the message, not only a hint: a test prints the
		// message.
		return binaries{}, errors.Wrapf(ErrNoPostgres, "no initdb in %s/*/bin; install the Debian package postgresql-15 (make deps does)", installRoot)
	}
	sort.Ints(versions)
	v := versions[len(versions)-1]
	for _, have := range versions {
		if have == PreferredVersion {
			v = have
		}
	}
	return binaries{dir: filepath.Join(installRoot, strconv.Itoa(v), "bin")}, nil
}

// runAs is the operating system user the PostgreSQL programs run as; nil
// is this process's own.
type runAs struct {
	uid, gid uint32
}

// serverUser returns whom the programs run as: this process's user, or
// the user postgres when this process is root (initdb and postgres refuse
// to run as root).
func serverUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.Wrap(err, "pgtest: PostgreSQL refuses to run as root, and there is no user postgres to run it as; "+
			"install the Debian package postgresql-15, which creates that user, or run as another user")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.CombineErrors(err1, err2); err != nil {
		return nil, errors.Wrapf(err, "pgtest: user postgres has ids %s:%s", u.Uid, u.Gid)
	}
	return &runAs{uid: uint32(uid), gid: uint32(gid)}, nil
}

// credential is what a child process runs as: nil for this process's own
// user. Groups is empty so that root's supplementary groups are dropped.
func (r *runAs) credential() *syscall.Credential {
	if r == nil {
		return nil
	}
	return &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: []uint32{}}
}

// own hands path to the user the programs run as.
func (r *runAs) own(path string) error {
	if r == nil {
		return nil
	}
	return errors.Wrapf(os.Chown(path, int(r.uid), int(r.gid)), "pgtest: hand %s to user postgres", path)
}
