package rolloutdb_test

import (
	"net/url"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/internal/netproxy"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/projection"
)

// TestFleetReadsUnavailable: with PostgreSQL cut off, a fleet workspace's
// reads (list, info, history, search, business state) and business
// writes fail with ErrUnavailable, as its
// appends do, so that a host can tell "retry later" from a bad request;
// once it is back they answer again.
func TestFleetReadsUnavailable(t *testing.T) {
	u, err := url.Parse(pgtesting.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()
	db, err := rolloutdb.Open(ctx, u.String(), rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "reader"}})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "find the flaky test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Commit(ctx, rolloutdb.Commit{}); err != nil {
		t.Fatal(err)
	}
	id := th.ID()
	reads := map[string]func() error{
		"List":       func() error { _, err := db.List(ctx, projection.ListOptions{}); return err },
		"ThreadInfo": func() error { _, err := db.ThreadInfo(ctx, id); return err },
		"Turns":      func() error { _, err := db.Turns(ctx, id, 1, 1); return err },
		"Search":     func() error { _, err := db.Search(ctx, "flaky", projection.SearchOptions{}); return err },
		"Goals":      func() error { _, err := db.Business().Goals(ctx, id); return err },
		"AddGoal":    func() error { _, err := db.Business().AddGoal(ctx, id, "make it pass"); return err },
	}
	p.Partition(netproxy.Refuse)
	for name, read := range reads {
		if err := read(); !errors.Is(err, rolloutdb.ErrUnavailable) {
			t.Errorf("%s with PostgreSQL cut off: %v, want ErrUnavailable", name, err)
		}
	}
	p.Heal()
	for name, read := range reads {
		if err := read(); err != nil {
			t.Errorf("%s once PostgreSQL is back: %v", name, err)
		}
	}
}
