package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/internal/pgtest"
	"github.com/rolloutdb/rolloutdb/internal/pgtest/pgtesting"
	"github.com/rolloutdb/rolloutdb/rollout"
)

// RequireSyncStandby refuses a primary with no synchronous standby, and
// opens on one with a streaming synchronous standby; an acknowledged
// append is then on the standby, which, promoted, has it (the primary's
// loss loses nothing acknowledged).
func TestRequireSyncStandbyAndPromotion(t *testing.T) {
	primary := pgtesting.New(t, pgtest.Options{})
	dsn, err := primary.CreateDatabase(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Open(ctx, dsn, fleet.Options{Host: "a", RequireSyncStandby: true}); !errors.Is(err, fleet.ErrNoSyncStandby) {
		t.Fatalf("open without a synchronous standby: %v", err)
	}
	standby := pgtesting.Standby(t, primary, "sb1")
	if err := primary.SetSynchronousStandbyNames(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := primary.WaitSynchronous(wctx, standby); err != nil {
		t.Fatal(err)
	}
	l, err := fleet.Open(ctx, dsn, fleet.Options{Host: "a", RequireSyncStandby: true})
	if err != nil {
		t.Fatal(err)
	}
	th, err := l.Create(ctx, rollout.ThreadOpened{ThreadID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 20 {
		text := fmt.Sprint("acked ", i)
		if _, err := th.Append(ctx, []rollout.Record{item(t, "", text)}, rollout.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, text)
	}
	// The primary dies: every acknowledged append is on the standby.
	l.Abandon()
	primary.Kill()
	if err := standby.Promote(wctx); err != nil {
		t.Fatal(err)
	}
	promoted := strings.Replace(dsn, primary.Addr(), standby.Addr(), 1)
	b := openLog(t, promoted, "b", fleet.Options{})
	if g := strings.Join(texts(t, readAll(t, b, "t1")), ","); g != strings.Join(want, ",") {
		t.Fatalf("the promoted standby holds %q", g)
	}
}
