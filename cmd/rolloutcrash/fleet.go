package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/jackc/pgx/v5"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/fleet"
	"github.com/rolloutdb/rolloutdb/internal/netproxy"
	"github.com/rolloutdb/rolloutdb/internal/pgtest"
	"github.com/rolloutdb/rolloutdb/projection"
)

// fleetHosts is how many host processes write a fleet workspace at once.
const fleetHosts = 3

// fleetFaults are the fleet mode's interruptions, one per iteration.
var fleetFaults = []string{"kill", "stop", "pgkill", "promote", "partition"}

// fleetPG is the fleet mode's PostgreSQL: a primary with a synchronous
// standby (every commit waits for the standby's flush), and a proxy per
// host slot between the hosts and the primary, for partitions and for
// the failover to a promoted standby.
type fleetPG struct {
	primary, standby *pgtest.Cluster
	dbname           string
	proxies          []*netproxy.Proxy
	standbys         int // made so far, for their names
}

// auditSQL installs the harness's own check of fencing, independent of
// the library's statements: a trigger on every frame inserted that
// records it in rolloutcrash.violations unless its epoch is its thread's
// at that moment. That is exact: the inserting statement holds the
// thread's row lock (FOR KEY SHARE) until it commits, and everything that
// changes a thread's epoch (a takeover, the resolve after a lost commit)
// takes the row FOR UPDATE first, so no epoch can change in between. A
// frame accepted from a fenced epoch is a row there.
//
// The owner's lease is not checked here: a commit round that began while
// the lease held may insert after it ran out (the host's heartbeat even
// took a new incarnation meanwhile), which is sound, since no other host
// can take the thread over before the round's row lock is gone, and the
// epoch check above is what would see it if one had.
const auditSQL = `
CREATE SCHEMA rolloutcrash;
CREATE TABLE rolloutcrash.violations (
	tid bigint, off bigint, seq bigint, frame_epoch bigint, thread_epoch bigint,
	owner text, owner_inc bigint, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION rolloutcrash.check_frame() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	th rolloutdb.threads%ROWTYPE;
BEGIN
	SELECT * INTO th FROM rolloutdb.threads WHERE tid = NEW.tid;
	IF th.epoch IS DISTINCT FROM NEW.epoch THEN
		INSERT INTO rolloutcrash.violations (tid, off, seq, frame_epoch, thread_epoch, owner, owner_inc)
		VALUES (NEW.tid, NEW.off, NEW.seq, NEW.epoch, th.epoch, th.owner, th.owner_inc);
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER audit_frames AFTER INSERT ON rolloutdb.frames FOR EACH ROW EXECUTE FUNCTION rolloutcrash.check_frame();
`

// startFleetPG starts the primary and its synchronous standby, creates
// the database with the fleet's schema and the audit trigger, and a proxy
// per host slot.
func startFleetPG(ctx context.Context, cfg *config) (*fleetPG, error) {
	// A standby that lost its primary (killed, restarted) tries again
	// every 100 ms, not 5 s: synchronous commits wait for it meanwhile.
	primary, err := pgtest.Start(ctx, pgtest.Options{MaxConnections: 200, Settings: map[string]string{"wal_retrieve_retry_interval": "100ms"}})
	if err != nil {
		return nil, err
	}
	p := &fleetPG{primary: primary}
	if err := p.setUp(ctx, cfg); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *fleetPG) setUp(ctx context.Context, cfg *config) error {
	if err := p.newDatabase(ctx, "rolloutcrash_0"); err != nil {
		return err
	}
	if err := p.newStandby(ctx); err != nil {
		return err
	}
	for range fleetHosts {
		px, err := netproxy.Start(p.primary.Addr())
		if err != nil {
			return err
		}
		p.proxies = append(p.proxies, px)
	}
	return nil
}

// newDatabase creates the database the next workspace lives in, with the
// fleet's schema and the audit trigger, and drops the last one (its hosts
// are dead): the cluster stays small, so that a new standby's base backup
// stays quick.
func (p *fleetPG) newDatabase(ctx context.Context, name string) error {
	old := p.dbname
	if _, err := p.primary.CreateDatabase(ctx, name); err != nil {
		return err
	}
	p.dbname = name
	// The fleet's schema, made by the first Log to open.
	l, err := fleet.Open(ctx, p.dsn(p.primary.Addr(), "setup"), fleet.Options{Host: "setup"})
	if err != nil {
		return err
	}
	if err := l.Close(); err != nil {
		return err
	}
	if err := p.primary.Exec(ctx, p.dbname, auditSQL); err != nil {
		return err
	}
	if old != "" {
		return p.primary.Exec(ctx, "postgres", "DROP DATABASE "+old+" WITH (FORCE)")
	}
	return nil
}

// newStandby makes a standby of the primary and makes it synchronous.
func (p *fleetPG) newStandby(ctx context.Context) error {
	p.standbys++
	s, err := p.primary.Standby(ctx, fmt.Sprintf("standby%d", p.standbys))
	if err != nil {
		return err
	}
	p.standby = s
	if err := p.primary.SetSynchronousStandbyNames(ctx, s.Name()); err != nil {
		return err
	}
	return p.primary.WaitSynchronous(ctx, s)
}

// promote is a failover: the primary dies (immediate shutdown), its
// synchronous standby is promoted, the proxies send the hosts to it, and
// it gets a synchronous standby of its own. The old primary is not
// started again (two primaries would be a split brain).
func (p *fleetPG) promote(ctx context.Context) error {
	old := p.primary
	old.Kill()
	if err := p.standby.Promote(ctx); err != nil {
		return err
	}
	p.primary, p.standby = p.standby, nil
	for _, px := range p.proxies {
		px.SetTarget(p.primary.Addr())
	}
	_ = old.Stop()
	return p.newStandby(ctx)
}

func (p *fleetPG) dsn(addr, workspace string) string {
	return pgtest.DSN(addr, p.dbname) + "&workspace=" + workspace
}

func (p *fleetPG) close() {
	for _, px := range p.proxies {
		_ = px.Close()
	}
	_ = p.primary.Stop()
}

// runFleet is the fleet mode (see the package doc).
func runFleet(ctx context.Context, cfg *config, st *stats) {
	pg, err := startFleetPG(ctx, cfg)
	if err != nil {
		c := cfg.checker("fleet", 0)
		c.failf(failOther, "start PostgreSQL: %+v", err)
		st.add(c.st)
		return
	}
	defer pg.close()
	var led *ledger
	var ws string
	var existing []string
	for iter := 0; iter < cfg.iterations; iter++ {
		if !cfg.until.IsZero() && time.Now().After(cfg.until) {
			break
		}
		c := cfg.checker("fleet", iter)
		if iter%cfg.keepFor == 0 {
			ws, led, existing = fmt.Sprintf("ws%d", iter), newLedger(), nil
			if iter > 0 {
				if err := pg.newDatabase(ctx, fmt.Sprintf("rolloutcrash_%d", iter)); err != nil {
					c.failf(failOther, "a new database: %+v", err)
				}
			}
		}
		existing = fleetIteration(ctx, cfg, c, pg, ws, led, existing)
		c.st.Iterations = 1
		st.add(c.st)
	}
}

// fleetIteration runs the host processes on workspace ws, interrupts them
// with one fault, kills them all and verifies what PostgreSQL holds; it
// returns the threads found.
func fleetIteration(ctx context.Context, cfg *config, c *checker, pg *fleetPG, ws string, led *ledger, existing []string) []string {
	iter := c.iter
	rng := iterRand(cfg.seed, "fleet", iter)
	// Every thread the workspace has, and new ones while it has fewer
	// than twice as many as hosts (so that every host owns some).
	cont := existing
	var created []string
	if len(existing) < 3*cfg.threads {
		for i := range at(1+rng.IntN(3), 2*fleetHosts-len(existing)) {
			created = append(created, fmt.Sprintf("f-%d-%d", iter, i))
		}
	}
	all := append(append([]string{}, cont...), created...)
	meta := rng.IntN(2) == 0
	acked0 := led.acked()
	hosts := make([]*child, fleetHosts)
	starts := make([]int, fleetHosts)
	// start starts host i; ready waits until it opened the workspace.
	start := func(i int, creates bool) (ready func()) {
		var mine []string
		if creates {
			for j, id := range created {
				if j%fleetHosts == i {
					mine = append(mine, id)
				}
			}
		}
		var others []string
		for _, id := range all {
			if !slices.Contains(mine, id) {
				others = append(others, id)
			}
		}
		starts[i]++
		cc := childConfig{Role: "fleet", Workspace: pg.dsn(pg.proxies[i].Addr(), ws), Host: fmt.Sprintf("h%d", i),
			Tag: fmt.Sprintf("f%dh%dr%d", iter, i, starts[i]), Seed: rng.Uint64(), Iter: iter,
			Existing: others, Created: mine, Meta: meta, Large: cfg.large, MaxRun: 2 * time.Minute, LeaseTTL: cfg.lease}
		ch, err := startChild(cfg, cc, led, false)
		if err != nil {
			c.failf(failOther, "start host %d: %v", i, err)
			return func() {}
		}
		hosts[i] = ch
		return func() {
			select {
			case <-led.signal("ready-" + cc.Tag):
			case <-ch.exited:
			case <-time.After(time.Minute):
				c.failf(failOther, "host %d was not ready after a minute", i)
			}
		}
	}
	var readies []func()
	for i := range fleetHosts {
		readies = append(readies, start(i, true))
	}
	for _, ready := range readies {
		ready()
	}
	sleep(rng, 150*time.Millisecond, 500*time.Millisecond)

	// In turn, so that every few iterations cover them all.
	fault := cfg.faults[iter%len(cfg.faults)]
	victim := pickOwner(ctx, pg, ws, rng)
	c.count("fault_"+fault, 1)
	debugf("fleet %d: %s (host %d)", iter, fault, victim)
	switch fault {
	case "kill":
		// Mid-turn: the host's threads are taken over by the others after
		// its lease; the host comes back (a new incarnation) and contends.
		if hosts[victim] != nil {
			hosts[victim].kill()
		}
		sleep(rng, 0, 400*time.Millisecond)
		start(victim, true)()
	case "stop":
		// Paused past its lease: the others take its threads; when it
		// continues it is a zombie whose appends must all be fenced.
		if ch := hosts[victim]; ch != nil {
			_ = ch.cmd.Process.Signal(syscall.SIGSTOP)
			sleep(rng, cfg.lease+100*time.Millisecond, cfg.lease+800*time.Millisecond)
			_ = ch.cmd.Process.Signal(syscall.SIGCONT)
		}
	case "pgkill":
		pg.primary.Kill()
		sleep(rng, 0, time.Second)
		if err := pg.primary.Restart(ctx); err != nil {
			c.failf(failOther, "restart PostgreSQL: %+v", err)
		}
	case "promote":
		if err := pg.promote(ctx); err != nil {
			c.failf(failOther, "promote the standby: %+v", err)
		}
	case "partition":
		mode := netproxy.Blackhole
		if rng.IntN(3) == 0 {
			mode = netproxy.Refuse
		}
		pg.proxies[victim].Partition(mode)
		sleep(rng, 300*time.Millisecond, cfg.lease+1500*time.Millisecond)
		pg.proxies[victim].Heal()
	}
	// Let the hosts go on after the fault (retries, takeovers, a zombie's
	// appends), then kill them all, mid-turn.
	sleep(rng, 200*time.Millisecond, 700*time.Millisecond)
	for _, ch := range hosts {
		if ch != nil {
			_ = ch.cmd.Process.Signal(syscall.SIGCONT)
			ch.kill()
		}
	}
	c.st.Acknowledged = led.acked() - acked0
	if ps := led.takeProblems(); len(ps) > 0 {
		for _, p := range ps {
			c.failf(failOther, "host: %s", p)
		}
		for i, ch := range hosts {
			if ch != nil {
				c.failf(failOther, "host %d %s", i, ch.tail())
			}
		}
	}
	for k, v := range led.takeCounters() {
		c.count(k, v)
	}
	return c.verifyFleet(ctx, cfg, pg, ws, led)
}

// pickOwner picks the host of a thread that is owned now (a host that
// owns nothing would make a stop or a partition no test of fencing), or
// any host.
func pickOwner(ctx context.Context, pg *fleetPG, ws string, rng *rand.Rand) int {
	conn, err := pgx.Connect(ctx, pgtest.DSN(pg.primary.Addr(), pg.dbname))
	if err != nil {
		return rng.IntN(fleetHosts)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT t.owner FROM rolloutdb.threads t JOIN rolloutdb.workspaces w USING (ws)
		WHERE w.name = $1 AND t.owner IS NOT NULL ORDER BY t.id`, ws)
	if err != nil {
		return rng.IntN(fleetHosts)
	}
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(owners) == 0 {
		return rng.IntN(fleetHosts)
	}
	var i int
	if _, err := fmt.Sscanf(owners[rng.IntN(len(owners))], "h%d", &i); err != nil || i < 0 || i >= fleetHosts {
		return rng.IntN(fleetHosts)
	}
	return i
}

// sleep waits a random time in [lo, hi].
func sleep(rng *rand.Rand, lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo)+1)))
}

// verifyFleet checks what PostgreSQL holds after the hosts were killed:
//   - every thread's rollout, read from its frames, against the ledger
//     (checkRollout: nothing acknowledged lost, no gap, no duplicate,
//     nothing never attempted, frames atomic and in order);
//   - the audit: no frame accepted from a fenced epoch or an expired
//     lease, and in each thread the frames' epochs never go down;
//   - the fleet's index (read-repaired) against a local rebuild of a
//     backup of the workspace (the backup writes the local format, a
//     local open builds state.db from it);
//   - every thread resumes on another host once the dead hosts' leases
//     ran out, resume equals the index, and it takes an append.
func (c *checker) verifyFleet(ctx context.Context, cfg *config, pg *fleetPG, ws string, led *ledger) []string {
	c.checkProblems(led)
	dsn := pg.dsn(pg.primary.Addr(), ws)
	l, err := fleet.Open(ctx, dsn, fleet.Options{Host: "checker-read"})
	if err != nil {
		c.failf(failUnreadable, "open the fleet workspace to read: %+v", err)
		return nil
	}
	defer l.Close()
	// Every host is dead, but a statement one sent before it died may
	// still commit (it waits for the synchronous standby, or a healed
	// proxy delivers it late): wait out their leases, and for their
	// backends to finish, before reading.
	if err := waitLeases(ctx, l); err != nil {
		c.failf(failOther, "wait for the hosts' leases: %+v", err)
	}
	if err := waitQuiet(ctx, l); err != nil {
		c.failf(failOther, "wait for the hosts' statements: %+v", err)
	}
	debugf("fleet verify: quiet")
	ids, err := l.List(ctx, projection.LocationActive)
	if err != nil {
		c.failf(failUnreadable, "list the fleet's threads: %+v", err)
		return nil
	}
	keys := keyReader{fs: l.Files(), dataDir: "/"}
	found := c.checkThreads(ids, led, func(id string) rolloutSource {
		return func() (io.ReaderAt, int64, string, func(), error) {
			s, err := l.Read(ctx, id)
			if err != nil {
				return nil, 0, l.Path(id), nil, err
			}
			return s, s.Size(), l.Path(id), func() { _ = s.Close() }, nil
		}
	}, keys, l.WorkspaceID(), false)
	c.audit(ctx, l)
	debugf("fleet verify: %d threads checked, audited", len(ids))

	// Open as a host of its own.
	db, err := rolloutdb.Open(ctx, dsn, rolloutdb.Options{Fleet: rolloutdb.FleetOptions{HostName: "checker", LeaseTTL: cfg.lease}, Logger: cfg.logger})
	if err != nil {
		c.failf(failUnreadable, "open the fleet workspace: %+v", err)
		return ids
	}
	defer db.Close()
	scratch := filepath.Join(cfg.dir, "fleet")
	backupDir := filepath.Join(scratch, fmt.Sprintf("backup-%d", c.iter))
	defer os.RemoveAll(backupDir)
	if _, err := db.Backup(ctx, backupDir, rolloutdb.BackupOptions{}); err != nil {
		c.failf(failUnreadable, "back the fleet workspace up: %+v", err)
	} else {
		rb := c.openRebuild(ctx, wsRef{dir: backupDir, scratch: scratch, logger: cfg.logger})
		if rb != nil {
			// The same but where each keeps the rollout.
			c.compare(ctx, db, rb.db, ids, "the fleet's index against a local rebuild of its backup", "rollout_path")
			rb.close()
		}
	}
	debugf("fleet verify: compared")
	for _, id := range ids {
		c.resumeAndAppend(ctx, db, id, found[id], led)
	}
	debugf("fleet verify: resumed")
	c.checkProblems(led)
	return ids
}

// audit takes the trigger's violations for this workspace's threads (each
// a frame accepted from a fenced epoch) and checks that in every thread
// the frames' epochs never go down.
func (c *checker) audit(ctx context.Context, l *fleet.Log) {
	rows, err := l.Pool().Query(ctx, `DELETE FROM rolloutcrash.violations v USING rolloutdb.threads t
		WHERE t.tid = v.tid AND t.ws = $1
		RETURNING v.tid, t.id, v.off, v.seq, v.frame_epoch, v.thread_epoch, coalesce(v.owner, '')`, l.Workspace())
	if err != nil {
		c.failf(failOther, "read the audit: %v", err)
		return
	}
	for rows.Next() {
		var tid, off, seq, fe, te int64
		var id, owner string
		if err := rows.Scan(&tid, &id, &off, &seq, &fe, &te, &owner); err != nil {
			c.failf(failOther, "read the audit: %v", err)
			break
		}
		c.failf(failOther, "thread %s: frame at offset %d (seq %d) accepted from a fenced epoch: its epoch %d, the thread's %d (owner %q)",
			id, off, seq, fe, te, owner)
		c.count("fenced_frames_accepted", 1)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		c.failf(failOther, "read the audit: %v", err)
	}
	var backwards int64
	err = l.Pool().QueryRow(ctx, `SELECT count(*) FROM (
		SELECT f.epoch < max(f.epoch) OVER (PARTITION BY f.tid ORDER BY f.off ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS back
		FROM rolloutdb.frames f JOIN rolloutdb.threads t USING (tid) WHERE t.ws = $1) x WHERE back`, l.Workspace()).Scan(&backwards)
	if err != nil {
		c.failf(failOther, "read the frames' epochs: %v", err)
	} else if backwards > 0 {
		c.failf(failOther, "%d frames follow a frame of a later epoch in their thread (written by a fenced owner)", backwards)
	}
}

// waitLeases returns once no host of the workspace but this one holds a
// lease.
func waitLeases(ctx context.Context, l *fleet.Log) error {
	for {
		var left int64 // µs
		err := l.Pool().QueryRow(ctx, `SELECT coalesce((extract(epoch FROM max(lease_until) - now()) * 1e6)::bigint, 0)
			FROM rolloutdb.hosts WHERE ws = $1 AND host <> $2`, l.Workspace(), l.Host()).Scan(&left)
		if err != nil {
			return err
		}
		if left <= 0 {
			return nil
		}
		time.Sleep(time.Duration(left)*time.Microsecond + 20*time.Millisecond)
	}
}

// waitQuiet returns once no session of the database but this one runs a
// statement (a dead host's backend ends when its statement is done and
// it finds the client gone).
func waitQuiet(ctx context.Context, l *fleet.Log) error {
	for {
		var busy int
		err := l.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle'`).Scan(&busy)
		if err != nil || busy == 0 {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childFleet is a host process of the fleet mode: it opens the fleet
// workspace (retrying while PostgreSQL is away) and writes until it is
// killed, contending for the threads with the other hosts.
func childFleet(ctx context.Context, cc childConfig, j journal, logger *slog.Logger) int {
	var db *rolloutdb.DB
	for {
		var err error
		db, err = rolloutdb.Open(ctx, cc.Workspace, rolloutdb.Options{Logger: logger,
			Fleet: rolloutdb.FleetOptions{HostName: cc.Host, LeaseTTL: cc.LeaseTTL}})
		if err == nil {
			break
		}
		if !errors.Is(err, rolloutdb.ErrUnavailable) {
			j("E open the workspace: " + oneLine(err.Error()))
			return 2
		}
		time.Sleep(100 * time.Millisecond)
	}
	j("R ready-" + cc.Tag)
	deadline := time.Now().Add(cc.MaxRun)
	rng := rand.New(rand.NewPCG(cc.Seed, 0x666c656574))
	wait := func() { time.Sleep(time.Duration(20+rng.IntN(130)) * time.Millisecond) }
	counts := map[string]int64{}
	count := func(name string) {
		counts[name]++
		j(fmt.Sprintf("N %s 1", name))
	}
	h := &host{ctx: ctx, db: db, j: j, exact: !cc.Meta, reopen: 0.05, large: cc.Large, idle: time.Second,
		stop: func() bool { return time.Now().After(deadline) },
		// An append: retried while PostgreSQL is away; a thread another
		// host took (fenced, or refused naming its owner) is lost, to be
		// opened again.
		onErr: func(err error, _ int64) error {
			switch {
			case errors.Is(err, rolloutdb.ErrFenced):
				count("fenced")
				return errLost
			case errors.Is(err, rolloutdb.ErrThreadLocked):
				return errLost
			case errors.Is(err, rolloutdb.ErrUnavailable):
				count("unavailable")
				wait()
				return nil
			}
			return err
		},
		// Opening a thread: retried while another host owns it, it does
		// not exist yet (another host creates it) or PostgreSQL is away.
		onOpenErr: func(err error, _ int64) error {
			switch {
			case errors.Is(err, rolloutdb.ErrThreadLocked):
				wait()
				return nil
			case errors.Is(err, rolloutdb.ErrNotFound), errors.Is(err, rolloutdb.ErrUnavailable), errors.Is(err, rolloutdb.ErrFenced):
				wait()
				return nil
			}
			return err
		},
		report: func(s string) { j("E " + oneLine(s)) },
	}
	runWorkers(h, cc.Existing, cc.Created, cc.Seed, cc.Tag, cc.Meta, true)
	if err := db.Close(); err != nil {
		j("E close: " + oneLine(err.Error()))
	}
	return 0
}
