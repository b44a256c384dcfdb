package projection

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutdb/rolloutdb/rollout"
)

// oldDB makes a state.db at schema version v, as that version of the code
// left it, with a row in each table that existed then.
func oldDB(t *testing.T, v int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrate(context.Background(), db, v); err != nil {
		t.Fatal(err)
	}
	body, err := rollout.EncodeBody(rollout.Item{ID: "i1", Type: rollout.ItemUserMessage, Text: "the marmot question"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO threads (id, location, rollout_path, projected_seq) VALUES ('t-old', 'active', 'threads/active/t-old.rollout', 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO items (thread_id, turn_id, item_id, seq, last_seq, type, body) VALUES ('t-old', 'u1', 'i1', 2, 2, 'user_message', ?)`, body); err != nil {
		t.Fatal(err)
	}
	if v >= 2 {
		if _, err := db.Exec(`INSERT INTO items_fts (rowid, text) SELECT id, 'the marmot question' FROM items`); err != nil {
			t.Fatal(err)
		}
	}
	if v >= 3 {
		if _, err := db.Exec(`INSERT INTO goals (thread_id, text, status, created_at, updated_at) VALUES ('t-old', 'kept goal', 'active', 1, 1)`); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestMigrateFromEachEarlierVersion(t *testing.T) {
	ctx := context.Background()
	for v := 1; v < SchemaVersion(); v++ {
		t.Run(fmt.Sprintf("from v%d", v), func(t *testing.T) {
			path := oldDB(t, v)
			w := newWorkspace(t)
			s, log := openLogged(t, w, path)
			rep := s.Report()
			if rep.MigratedFrom != v || rep.Created || rep.Corrupt || rep.BusinessStateLost {
				t.Fatalf("report: %+v", rep)
			}
			if got := count(t, s.r, `SELECT max(version) FROM schema_migrations`); got != SchemaVersion() {
				t.Fatalf("at version %d", got)
			}
			if got := count(t, s.r, `SELECT count(*) FROM schema_migrations`); got != SchemaVersion() {
				t.Fatalf("%d migrations recorded", got)
			}
			if log.Len() == 0 {
				t.Fatal("migration not logged")
			}
			// Rows written by the old version are still there (read before
			// any read-repair, which would drop t-old: it has no rollout).
			if n := count(t, s.r, `SELECT count(*) FROM threads WHERE id = 't-old'`); n != 1 {
				t.Fatal("old thread row lost")
			}
			if n := count(t, s.r, `SELECT count(*) FROM items_fts WHERE items_fts MATCH 'marmot'`); n != 1 {
				t.Fatal("old items not in the full-text index")
			}
			if v >= 3 {
				if g, _ := s.Goals(ctx, "t-old"); len(g) != 1 {
					t.Fatal("old goal lost")
				}
			}
			// Every table of the current schema works.
			if _, err := s.AddGoal(ctx, "t-old", "new goal"); err != nil {
				t.Fatal(err)
			}
			if err := s.OpenEdge(ctx, "t-old", "t-child"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNewerSchemaIsRefusedAndLeftAlone(t *testing.T) {
	path := oldDB(t, SchemaVersion())
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from the future', 0)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := fileHash(t, path)
	w := newWorkspace(t)
	_, err = Open(context.Background(), Options{Path: path, Root: w.root})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("open of a newer schema: %v", err)
	}
	if fileHash(t, path) != before {
		t.Fatal("a newer state.db was changed")
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
