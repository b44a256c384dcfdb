package projection

import (
	"context"
	"database/sql"
	"time"

	"github.com/cockroachdb/errors"
)

// BusinessExport is every row of a workspace's business state, with its
// ids and times (ExportBusiness): what a copy of it into another
// workspace takes (a fleet index's ImportBusiness, which keys each goal
// and message by the workspace it came from and its id there).
type BusinessExport struct {
	Goals       []Goal       `json:"goals"`
	Plans       []Plan       `json:"plans"`
	Edges       []Edge       `json:"edges"`
	Messages    []Message    `json:"messages"`
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// Plan is a thread's plan and when it was last set.
type Plan struct {
	Thread    string     `json:"thread"`
	Steps     []PlanStep `json:"steps"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// Of returns the part of e that belongs to the threads keep says yes to:
// their goals, plans and diagnostics, and the edges and messages with an
// end among them.
func (e BusinessExport) Of(keep func(thread string) bool) BusinessExport {
	out := BusinessExport{Goals: []Goal{}, Plans: []Plan{}, Edges: []Edge{}, Messages: []Message{}, Diagnostics: []Diagnostic{}}
	for _, g := range e.Goals {
		if keep(g.Thread) {
			out.Goals = append(out.Goals, g)
		}
	}
	for _, p := range e.Plans {
		if keep(p.Thread) {
			out.Plans = append(out.Plans, p)
		}
	}
	for _, ed := range e.Edges {
		if keep(ed.Parent) || keep(ed.Child) {
			out.Edges = append(out.Edges, ed)
		}
	}
	for _, m := range e.Messages {
		if keep(m.From) || keep(m.To) {
			out.Messages = append(out.Messages, m)
		}
	}
	for _, d := range e.Diagnostics {
		if keep(d.Thread) {
			out.Diagnostics = append(out.Diagnostics, d)
		}
	}
	return out
}

// Rows counts the rows of an export.
func (e BusinessExport) Rows() int {
	n := len(e.Goals) + len(e.Edges) + len(e.Messages) + len(e.Diagnostics)
	for _, p := range e.Plans {
		n += len(p.Steps)
	}
	return n
}

// BusinessImport says what an import of business state changed, by kind
// of row.
type BusinessImport struct {
	Goals       RowCounts `json:"goals"`
	Plans       RowCounts `json:"plans"` // a plan counts once, whatever its steps
	Edges       RowCounts `json:"edges"`
	Messages    RowCounts `json:"messages"`
	Diagnostics RowCounts `json:"diagnostics"`
}

// RowCounts are rows added and rows updated.
type RowCounts struct {
	Added   int `json:"added"`
	Updated int `json:"updated"`
}

// ExportBusiness reads every row of the business state at once (one read
// transaction), in id or key order.
func (s *Store) ExportBusiness(ctx context.Context) (_ BusinessExport, err error) {
	defer s.guard(&err)
	if err := s.live(); err != nil {
		return BusinessExport{}, err
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return BusinessExport{}, errors.Wrap(err, "export business state")
	}
	defer func() { _ = tx.Rollback() }()
	e := BusinessExport{Goals: []Goal{}, Plans: []Plan{}, Edges: []Edge{}, Messages: []Message{}, Diagnostics: []Diagnostic{}}
	each := func(q string, scan func(*sql.Rows) error) error {
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	at := func(ns int64) time.Time { return time.Unix(0, ns).UTC() }
	for _, q := range []struct {
		sql  string
		scan func(*sql.Rows) error
	}{
		{`SELECT id, thread_id, text, status, created_at, updated_at FROM goals ORDER BY id`, func(r *sql.Rows) error {
			var g Goal
			var c, u int64
			err := r.Scan(&g.ID, &g.Thread, &g.Text, &g.Status, &c, &u)
			g.CreatedAt, g.UpdatedAt = at(c), at(u)
			e.Goals = append(e.Goals, g)
			return err
		}},
		{`SELECT thread_id, text, status, updated_at FROM plans ORDER BY thread_id, step`, func(r *sql.Rows) error {
			var thread string
			var st PlanStep
			var u int64
			if err := r.Scan(&thread, &st.Text, &st.Status, &u); err != nil {
				return err
			}
			if n := len(e.Plans); n == 0 || e.Plans[n-1].Thread != thread {
				e.Plans = append(e.Plans, Plan{Thread: thread, UpdatedAt: at(u)})
			}
			p := &e.Plans[len(e.Plans)-1]
			p.Steps = append(p.Steps, st)
			return nil
		}},
		{`SELECT parent, child, status, created_at, closed_at FROM subagent_edges ORDER BY parent, child`, func(r *sql.Rows) error {
			var ed Edge
			var c, cl int64
			err := r.Scan(&ed.Parent, &ed.Child, &ed.Status, &c, &cl)
			ed.CreatedAt = at(c)
			if cl != 0 {
				t := at(cl)
				ed.ClosedAt = &t
			}
			e.Edges = append(e.Edges, ed)
			return err
		}},
		{`SELECT id, from_thread, to_thread, body, created_at, read_at FROM mailbox ORDER BY id`, func(r *sql.Rows) error {
			var m Message
			var c, rd int64
			err := r.Scan(&m.ID, &m.From, &m.To, &m.Body, &c, &rd)
			m.CreatedAt = at(c)
			if rd != 0 {
				t := at(rd)
				m.ReadAt = &t
			}
			e.Messages = append(e.Messages, m)
			return err
		}},
		{`SELECT thread_id, offset, length, first_seq, last_seq, kind, reason, ack_lost, seen_at FROM diagnostics ORDER BY thread_id, offset, first_seq`, func(r *sql.Rows) error {
			var d Diagnostic
			var first, last, seen int64
			err := r.Scan(&d.Thread, &d.Offset, &d.Length, &first, &last, &d.Kind, &d.Reason, &d.AckLost, &seen)
			d.FirstSeq, d.LastSeq, d.SeenAt = uint64(first), uint64(last), at(seen)
			e.Diagnostics = append(e.Diagnostics, d)
			return err
		}},
	} {
		if err := each(q.sql, q.scan); err != nil {
			return BusinessExport{}, errors.Wrap(err, "export business state")
		}
	}
	return e, nil
}
