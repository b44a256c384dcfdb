package projection

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	if v < 5 {
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
	} else if _, err := db.Exec(`INSERT INTO threads (id, location, rollout_path, projected_seq) VALUES ('t-old', 'active', 'threads/active/t-old.rollout', 3)`); err != nil {
		t.Fatal(err)
	}
	if v >= 2 && v < 5 {
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
			w.create("t-new", rollout.Source{})
			w.turn("t-new", "u1", "the marmot question")
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
			// Projections are rebuilt from the rollouts (migration 5 made
			// them anew); what the old version held of a thread with no
			// rollout is gone with them; business state is all there.
			if rep.Rebuild == nil || rep.Rebuild.Threads != 1 {
				t.Fatalf("projections not rebuilt: %+v", rep.Rebuild)
			}
			if n := count(t, s.r, `SELECT count(*) FROM threads WHERE id = 't-old'`); n != 0 {
				t.Fatal("a row of the old projections survived")
			}
			hits, err := s.Search(ctx, "marmot", SearchOptions{})
			if err != nil || len(hits) == 0 {
				t.Fatalf("search after migration: %+v %v", hits, err)
			}
			for _, h := range hits {
				if h.Thread != "t-new" {
					t.Fatalf("search after migration found %+v", h)
				}
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

// The workspace a release at schema 4 wrote (testdata/state-v4): its
// state.db migrates in place, loses no business state, and then says
// exactly what a state.db built from the rollouts says.
func TestMigrateTheSchema4Release(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), ".craft")
	if err := os.CopyFS(root, os.DirFS(filepath.Join("..", "testdata", "state-v4", ".craft"))); err != nil {
		t.Fatal(err)
	}
	var ws struct {
		ID string `json:"workspace_id"`
	}
	b, err := os.ReadFile(filepath.Join(root, "workspace.json"))
	if err != nil || json.Unmarshal(b, &ws) != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "state.db")
	before := business(t, openRaw(t, path))
	s, err := Open(ctx, Options{Path: path, Root: root, WorkspaceID: ws.ID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep := s.Report(); rep.MigratedFrom != 4 || rep.BusinessStateLost || rep.Corrupt || rep.Rebuild == nil || rep.Rebuild.Threads != 4 {
		t.Fatalf("report: %+v", rep)
	}
	if got := business(t, s); got != before {
		t.Fatalf("business state changed by the migration:\n%s", dumpDiff(got, before))
	}
	fresh, err := Open(ctx, Options{Root: root, WorkspaceID: ws.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, want := dump(t, s), dump(t, fresh); got != want {
		t.Fatalf("migrated projections differ from a rebuild:\n%s", dumpDiff(got, want))
	}
	page, err := s.List(ctx, ListOptions{Scope: ScopeAll})
	if err != nil || len(page.Threads) != 4 {
		t.Fatalf("list: %+v %v", page, err)
	}
	var renamed *ThreadInfo
	for i := range page.Threads {
		if page.Threads[i].Name == "renamed before the migration" {
			renamed = &page.Threads[i]
		}
	}
	if renamed == nil || !slices.Equal(renamed.Labels, []string{"fixture", "v4"}) {
		t.Fatalf("the rename is not in the migrated list: %+v", page.Threads)
	}
	hits, err := s.Search(ctx, "retry", SearchOptions{IncludeArchived: true})
	if err != nil || len(hits) == 0 {
		t.Fatalf("search after migration: %+v %v", hits, err)
	}
	turns, err := s.Turns(ctx, renamed.ID, 1, 3)
	if err != nil || len(turns) == 0 || int64(len(turns)) != min(3, renamed.Turns) || len(turns[0].Items) == 0 || turns[0].Items[0].Type != rollout.ItemUserMessage || turns[0].Items[0].Text == "" {
		t.Fatalf("paged history after migration: %+v %v", turns, err)
	}
	// Bodies live in the rollouts now: the migrated file is small.
	if fi, err := os.Stat(path); err != nil || fi.Size() >= 220000 {
		t.Fatalf("state.db after migration: %v bytes (%v); the schema-4 file was 221184", fi.Size(), err)
	}
}

// openRaw opens a state.db file as a Store would read its business
// tables, without migrating it.
func openRaw(t *testing.T, path string) *Store {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &Store{r: db, w: db}
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
