package projection

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// ErrNotFound is returned when no rollout holds the thread.
var ErrNotFound = errors.New("projection: thread not found")

// ErrBadCursor is returned for a cursor that this list did not hand out.
var ErrBadCursor = errors.New("projection: invalid cursor")

// ThreadInfo is one thread as listed.
type ThreadInfo struct {
	ID string `json:"id"`
	// Status is where the thread is: "active" or "archived".
	Status string `json:"status"`
	// State is the host's own status, set by metadata_updated.
	State       string          `json:"state,omitempty"`
	Name        string          `json:"name"` // "" when unnamed (scripts rely on the field)
	Labels      []string        `json:"labels"`
	Flags       map[string]bool `json:"flags,omitempty"`
	Source      rollout.Source  `json:"source"`
	ForkedFrom  string          `json:"forked_from,omitempty"`
	ForkedTurn  string          `json:"forked_from_turn,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	Turns       int64           `json:"turns"`
	Items       int64           `json:"items"`
	LastRole    string          `json:"last_role,omitempty"`
	Preview     string          `json:"preview,omitempty"`
	Usage       rollout.Usage   `json:"usage"`
	OpenTurn    string          `json:"open_turn,omitempty"`
	RolloutPath string          `json:"rollout_path"` // relative to the data directory
	// ProjectedOffset and ProjectedSeq say how far the rollout was read.
	ProjectedOffset int64  `json:"projected_offset"`
	ProjectedSeq    uint64 `json:"projected_seq"`
	// CheckpointOffset is the frame of the latest checkpoint whose covered
	// turn is visible (0: none): resume can start reading there.
	CheckpointOffset int64 `json:"checkpoint_offset,omitempty"`
	// Damage counts the rejected records and damaged regions seen.
	Damage int64 `json:"damage,omitempty"`
	// IdentityError is set when the rollout is not safely this
	// workspace's thread (its header is unreadable, names another thread
	// or workspace, or conflicts with a later one).
	IdentityError string `json:"identity_error,omitempty"`
}

func (t *threadRow) info() ThreadInfo {
	return ThreadInfo{
		// Copies: the row may be List's cached one, and callers own what
		// they are given.
		ID: t.ID, Status: t.Location, State: t.State, Name: t.Name, Labels: nonNil(slices.Clone(t.Labels)), Flags: maps.Clone(t.Flags),
		Source:     rollout.Source{Kind: t.SourceKind, Client: t.SourceClient, Parent: t.Parent, Root: t.Root, Depth: t.Depth},
		ForkedFrom: t.ForkedFrom, ForkedTurn: t.ForkedTurn,
		CreatedAt: time.Unix(0, t.CreatedAt).UTC(), UpdatedAt: time.Unix(0, t.UpdatedAt).UTC(),
		Turns: t.TurnCount, Items: t.ItemCount, LastRole: t.LastRole, Preview: t.Preview, Usage: t.Usage,
		OpenTurn: t.OpenTurn, RolloutPath: t.RolloutPath, ProjectedOffset: t.ProjectedOffset, ProjectedSeq: t.ProjectedSeq,
		CheckpointOffset: t.CheckpointOffset, Damage: t.DamageCount, IdentityError: t.IdentityError,
	}
}

// Scope selects threads by location.
type Scope int

const (
	ScopeActive   Scope = iota // threads/active (default)
	ScopeArchived              // threads/archived
	ScopeAll
)

// Sort orders a list, newest first.
type Sort int

const (
	SortUpdated Sort = iota // by last record (default)
	SortCreated             // by creation
)

// ListOptions filter and page a list. The zero value lists the 50 most
// recently updated active threads.
type ListOptions struct {
	Scope Scope
	// State, Label, SourceKind and Parent, when set, must match.
	State      string
	Label      string
	SourceKind string
	Parent     string
	Sort       Sort
	// Limit is the page size. Default 50, at most 1000.
	Limit int
	// Cursor continues from the page that returned it.
	Cursor string
}

// Page is one page of a list.
type Page struct {
	Threads []ThreadInfo `json:"threads"`
	// NextCursor fetches the next page; "" on the last.
	NextCursor string `json:"next_cursor"`
}

// List returns one page of threads, newest first. Pages are cut by a
// cursor (the sort key and id of the last row), not an offset: a thread
// created while paging does not shift the pages after it.
//
// Reads are filesystem-first. Before the query, what this process appended
// is applied, and one listing of the thread directories finds rollouts
// with no row (projected now), rows whose rollout moved (updated) and rows
// whose rollout is gone (dropped). Every row on the page is then checked
// against its rollout's size and brought forward if behind, before it is
// returned. A thread appended to by another process and not on the page is
// ordered by its projection until a read touches it (Refresh touches all).
func (s *Store) List(ctx context.Context, o ListOptions) (_ Page, err error) {
	defer s.guard(&err)
	if err := s.Flush(ctx); err != nil {
		return Page{}, err
	}
	if err := s.reconcile(ctx, false); err != nil {
		return Page{}, err
	}
	for attempt := 0; ; attempt++ {
		page, rows, err := s.listQuery(ctx, o)
		if err != nil || attempt == 2 {
			return page, err
		}
		changed, err := s.refreshThreads(ctx, rows)
		if err != nil || !changed {
			return page, err
		}
		// A row was behind: its sort key may have moved. Ask again.
	}
}

func (s *Store) listQuery(ctx context.Context, o ListOptions) (Page, map[string]rowState, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	key := "updated_at"
	if o.Sort == SortCreated {
		key = "created_at"
	}
	var where []string
	var args []any
	switch o.Scope {
	case ScopeActive:
		where = append(where, "t.location = 'active'")
	case ScopeArchived:
		where = append(where, "t.location = 'archived'")
	}
	from := "threads t"
	if o.Label != "" {
		from = "thread_labels l JOIN threads t ON t.id = l.thread_id"
		where = append(where, "l.label = ?")
		args = append(args, o.Label)
	}
	for _, f := range []struct{ col, v string }{{"t.state", o.State}, {"t.source_kind", o.SourceKind}, {"t.parent", o.Parent}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	if o.Parent != "" {
		// Says what the bound parameter cannot, so that SQLite may use
		// the partial index threads_by_parent (parent != ''): a thread's
		// children are found without a scan of every row (archive and
		// delete walk a tree this way).
		where = append(where, "t.parent != ''")
	}
	if o.Cursor != "" {
		ck, cid, err := decodeCursor(o.Cursor, o.Sort)
		if err != nil {
			return Page{}, nil, err
		}
		where = append(where, fmt.Sprintf("(t.%s, t.id) < (?, ?)", key))
		args = append(args, ck, cid)
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	order := fmt.Sprintf(" ORDER BY t.%s DESC, t.id DESC LIMIT ?", key)
	args = append(args, limit+1)
	// The page's keys first, and only the rows this store has not read at
	// their current rev: a row's 40 columns cost 20 times its id and rev
	// to fetch. A row whose rev moved between the two queries (another
	// writer) makes the page be asked again; the third time it is read
	// whole, in one statement.
	var keys []pageKey
	for attempt := 0; attempt < 2; attempt++ {
		var err error
		if keys, err = s.pageKeys(ctx, "SELECT t.id, t.rev FROM "+from+cond+order, args); err != nil {
			return Page{}, nil, err
		}
		rows, ok, err := s.pageRows(ctx, keys)
		if err != nil {
			return Page{}, nil, err
		}
		if ok {
			return makePage(o.Sort, limit, rows)
		}
	}
	q := "SELECT " + prefixCols("t.", threadCols) + " FROM " + from + cond + order
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return Page{}, nil, errors.Wrap(err, "list threads")
	}
	defer rows.Close()
	var all []*threadRow
	for rows.Next() {
		t, err := scanThread(rows)
		if err != nil {
			return Page{}, nil, errors.Wrap(err, "list threads")
		}
		all = append(all, t)
	}
	if err := rows.Err(); err != nil {
		return Page{}, nil, errors.Wrap(err, "list threads")
	}
	s.cacheRows(all)
	return makePage(o.Sort, limit, all)
}

type pageKey struct {
	id  string
	rev int64
}

func (s *Store) pageKeys(ctx context.Context, q string, args []any) ([]pageKey, error) {
	rows, err := s.rquery(ctx, q, args...)
	if err != nil {
		return nil, errors.Wrap(err, "list threads")
	}
	defer rows.Close()
	var keys []pageKey
	for rows.Next() {
		var k pageKey
		if err := rows.Scan(&k.id, &k.rev); err != nil {
			return nil, errors.Wrap(err, "list threads")
		}
		keys = append(keys, k)
	}
	return keys, errors.Wrap(rows.Err(), "list threads")
}

// pageRows returns the rows of keys, in order, from the page cache and
// one query for the rest; ok is false when a row read has another rev
// than its key (it changed since).
func (s *Store) pageRows(ctx context.Context, keys []pageKey) (_ []*threadRow, ok bool, _ error) {
	out := make([]*threadRow, len(keys))
	var missing []any
	at := map[string]int{}
	s.pageMu.Lock()
	for i, k := range keys {
		if t := s.pageCache[k.id]; t != nil && t.Rev == k.rev {
			out[i] = t
		} else {
			missing = append(missing, k.id)
			at[k.id] = i
		}
	}
	s.pageMu.Unlock()
	if len(missing) == 0 {
		return out, true, nil
	}
	q := "SELECT " + threadCols + " FROM threads WHERE id IN (?" + strings.Repeat(",?", len(missing)-1) + ")"
	rows, err := s.r.QueryContext(ctx, q, missing...)
	if err != nil {
		return nil, false, errors.Wrap(err, "list threads")
	}
	defer rows.Close()
	var read []*threadRow
	ok = true
	for rows.Next() {
		t, err := scanThread(rows)
		if err != nil {
			return nil, false, errors.Wrap(err, "list threads")
		}
		read = append(read, t)
		if i, found := at[t.ID]; found && keys[i].rev == t.Rev {
			out[i] = t
			delete(at, t.ID)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, errors.Wrap(err, "list threads")
	}
	s.cacheRows(read)
	return out, ok && len(at) == 0, nil
}

// maxPageCache bounds the rows List keeps (about 1 KB each).
const maxPageCache = 4096

func (s *Store) cacheRows(rows []*threadRow) {
	s.pageMu.Lock()
	defer s.pageMu.Unlock()
	if len(s.pageCache)+len(rows) > maxPageCache {
		clear(s.pageCache)
	}
	for _, t := range rows {
		s.pageCache[t.ID] = t
	}
}

// makePage cuts rows (up to limit+1, in order) into a page, with the
// cursor of its last row when there are more, and what the
// filesystem-first check needs of each row.
func makePage(sort Sort, limit int, rows []*threadRow) (Page, map[string]rowState, error) {
	page := Page{Threads: make([]ThreadInfo, 0, min(len(rows), limit))}
	states := make(map[string]rowState, len(rows))
	for i, t := range rows {
		if i == limit {
			page.NextCursor = encodeCursor(sort, rows[i-1])
			break
		}
		page.Threads = append(page.Threads, t.info())
		states[t.ID] = rowState{location: t.Location, path: t.RolloutPath, fileSize: t.FileSize}
	}
	return page, states, nil
}

func prefixCols(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// A cursor is "<sort>.<key ns>.<id>", base64url: opaque to callers, and
// checked, not trusted.
func encodeCursor(s Sort, t *threadRow) string {
	key := t.UpdatedAt
	if s == SortCreated {
		key = t.CreatedAt
	}
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d.%d.%s", s, key, t.ID))
}

func decodeCursor(c string, s Sort) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", errors.Wrapf(ErrBadCursor, "%q", c)
	}
	parts := strings.SplitN(string(b), ".", 3)
	if len(parts) != 3 || parts[0] != strconv.Itoa(int(s)) || rollout.ValidateThreadID(parts[2]) != nil {
		return 0, "", errors.WithHint(errors.Wrapf(ErrBadCursor, "%q", c), "pass the next_cursor of a list with the same sort")
	}
	key, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", errors.Wrapf(ErrBadCursor, "%q", c)
	}
	return key, parts[2], nil
}

// Anchor returns the last frame the thread's row applied, as the row has
// it (no read-repair): a hint for rollout.Options.From, which checks it
// against the file. ok is false when the row has none.
func (s *Store) Anchor(ctx context.Context, id string) (a rollout.Anchor, ok bool) {
	if s.live() != nil {
		return a, false
	}
	var off, seq, crc int64
	err := s.r.QueryRowContext(ctx, `SELECT anchor_offset, anchor_seq, anchor_crc FROM threads WHERE id = ?`, id).Scan(&off, &seq, &crc)
	if err != nil || off <= 0 {
		return a, false
	}
	return rollout.Anchor{Offset: off, Seq: uint64(seq), DataCRC: uint32(crc)}, true
}

// Thread returns one thread's row, brought up to date with its rollout
// first. ErrNotFound if no rollout holds it.
func (s *Store) Thread(ctx context.Context, id string) (_ ThreadInfo, err error) {
	defer s.guard(&err)
	t, err := s.freshThread(ctx, id)
	if err != nil {
		return ThreadInfo{}, err
	}
	return t.info(), nil
}

// freshThread applies what is queued, then checks the thread's row
// against its rollout (wherever it now is) and repairs it.
func (s *Store) freshThread(ctx context.Context, id string) (*threadRow, error) {
	if err := rollout.ValidateThreadID(id); err != nil {
		return nil, err
	}
	if err := s.Flush(ctx); err != nil {
		return nil, err
	}
	t, err := s.readThread(ctx, id)
	if err != nil {
		return nil, err
	}
	st := rowState{location: LocationActive, path: rolloutFile{id: id, location: LocationActive}.rel(), fileSize: -1}
	if t != nil {
		st = rowState{location: t.Location, path: t.RolloutPath, fileSize: t.FileSize}
	}
	changed, err := s.refreshThreads(ctx, map[string]rowState{id: st})
	if err != nil {
		return nil, err
	}
	if changed {
		if t, err = s.readThread(ctx, id); err != nil {
			return nil, err
		}
	}
	if t == nil {
		return nil, errors.Wrapf(ErrNotFound, "thread %s", id)
	}
	return t, nil
}

const qReadThread = `SELECT ` + threadCols + ` FROM threads WHERE id = ?`

func (s *Store) readThread(ctx context.Context, id string) (*threadRow, error) {
	rows, err := s.rquery(ctx, qReadThread, id)
	if err != nil {
		return nil, errors.Wrapf(err, "read thread %s", id)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, errors.Wrapf(rows.Err(), "read thread %s", id)
	}
	t, err := scanThread(rows)
	return t, errors.Wrapf(err, "read thread %s", id)
}
