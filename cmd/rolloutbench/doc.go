// Command rolloutbench compares rolloutdb with what agent tools do instead,
// in one process, side by side, on the same generated workload.
//
// The workload is a deterministic stream of agent-turn items drawn from a
// seed: user and agent messages, reasoning, tool calls and tool results of
// mixed sizes (a few dozen bytes to 24 KiB; under the facade's 32 KiB spill
// threshold, so every byte stays in the log of every system). The systems:
//
//   - rolloutdb: the facade (rolloutdb.Open, rollout.SyncAlways). Each
//     append is one Turn.Add into the thread's open turn: one record,
//     acknowledged only once durable. Its asynchronous projection into
//     state.db is part of what it writes and is counted in its bytes.
//   - rolloutdb-thread-append (append scenarios only): the same facade, each
//     record appended with Thread.Append instead. It is here to show what the
//     writer's group commit gives when Turn's lock does not serialize the
//     appenders; ratios are always taken against rolloutdb, not against it.
//   - jsonl-fsync: one JSONL file per thread, one json.Marshal'd line per
//     record, write then fsync (os.File.Sync) per record; appenders to one
//     file serialize on a mutex.
//   - rewrite: the whole session rewritten atomically at every save (a JSON
//     array: temporary file, fsync, rename, directory fsync). A save costs
//     the session's size, so a thread is capped (--rewrite-max records,
//     warm-up included) and its figures are those measured up to that
//     length; the output says where it was capped.
//   - sqlite: modernc.org/sqlite, WAL, synchronous=FULL, one transaction (an
//     autocommit INSERT) per record into records(thread, seq, kind, time,
//     turn, body), one database for all threads, one connection.
//   - pebble (append scenarios only): cockroachdb/pebble v2 with its
//     default options, one DB for all threads, a key per record (the
//     thread id, a 0x00, the big-endian seq), its value the record's JSON
//     as the JSONL line holds it. Each append is one Batch committed with
//     pebble.Sync: a WAL write and an fdatasync, concurrent commits sharing
//     one (pebble's group commit). It is the strongest embedded peer: its
//     write path is a group-committed log like rolloutdb's, with nothing
//     indexed per record on disk (the memtable is flushed in the
//     background). It sits out replay, list and size.
//   - rollout-writer (append scenarios, only when named in --systems): the
//     rollout package's Writer alone, SyncAlways, without the facade: no
//     projection into state.db. It separates the log's cost from the
//     facade's.
//
// Scenarios (stable names, the "scenario" field of --json):
//
//	append-1thread-<W>writers  W concurrent appenders on one thread
//	append-<T>threads          T threads appended at once, one appender each
//	replay                     a full replay of one large thread
//	list-<N>                   the 50 most recently updated of N threads
//	size-active                on-disk size of the large thread
//	size-archived              its size once archived
//
// How each figure is made:
//
//   - records_per_sec: records acknowledged durable / wall time of the
//     measured phase (after a warm-up that is not counted).
//   - p50_us, p99_us: latency of each append call (time.Now around it; it
//     includes waiting for a lock or a shared fsync), over every append.
//   - bytes_per_record: growth of everything the system keeps on disk during
//     the measured phase (file sizes: rollouts and state.db with its WAL;
//     JSONL files; sessions; SQLite database and -wal; pebble's directory)
//     / records.
//     log_bytes_per_record (rolloutdb only) is the rollout alone.
//   - written_bytes_per_record: the write_bytes delta of /proc/self/io over
//     the measured phase and its settling (rolloutdb's projector catching
//     up; pebble's flushes and compactions finishing) / records: what the process made the kernel write, page-granular,
//     journal not included. Absent where /proc/self/io is not readable.
//   - replay: median wall time of a full replay. rolloutdb: DB.Resume (it
//     opens the writer, which reads the file to its end, then replays: turns
//     assembled, model history built). jsonl: read every line and
//     json.Unmarshal it into typed structs; rewrite: read and unmarshal the
//     array the same way; sqlite: SELECT the thread's rows in seq order and
//     unmarshal their bodies. The baselines group items by turn and nothing
//     more, so they are flattered.
//   - list-<N>: p50 of one page of 50. rolloutdb: DB.List from state.db
//     (with its filesystem-first check). jsonl and rewrite: read the head of
//     every file for its title, stat it for its modification time, sort,
//     take 50. sqlite: SELECT ... ORDER BY updated_at DESC LIMIT 50 on an
//     index. Every system must return the same 50 ids.
//   - size-active: the large thread's file (bytes); total_bytes adds
//     state.db for rolloutdb. size-archived: rolloutdb DB.Archive then
//     DB.CompressArchived (.rollout.zst); jsonl and rewrite: the file
//     compressed with zstd at its default level (klauspost/compress);
//     sqlite: VACUUM then a WAL checkpoint (TRUNCATE): SQLite has no
//     per-thread archive.
//
// rolloutdb_advantage is how many times better rolloutdb does than the
// system on the row: its records/s over theirs, their time over its time,
// their size over its size. Below 1, rolloutdb loses.
//
// Systems run one after another within each scenario, in the same process,
// so ratios are fair even when absolute figures drift. Everything is read
// with a warm page cache. Results on tmpfs (where fsync is free) say nothing
// about durability; the machine section names the file system of the data
// directory, which defaults to .rolloutbench-tmp-* under the current
// directory (--dir names another parent) and is removed at the end (--keep
// keeps it). Every system's records are
// read back from disk after each scenario and counted; a mismatch fails the
// run.
//
// # Fleet
//
// --fleet runs one scenario instead of the others,
// fleet-<T>threads-<H>hosts: --threads threads (64) appended at once, one
// appender each, each record (a 1 KiB agent message: 1,000 bytes of text
// drawn from the seed) acknowledged before the thread's next, as the
// append scenarios do. Each record is a frame of its own: the
// frame a turn's commit writes holds its final items and model history
// in one frame, acknowledged the same way, with more bytes. Sizes: 64,000
// records in all (--records), 640 of warm-up (--warmup), 4 rounds
// (--rounds) in which the systems take turns; --quick: 6,400, 64 and 2. Hosts are real processes: rolloutbench starts
// itself again as each host (the environment variable ROLLOUTBENCH_HOST
// says so), tells it its threads on its standard input, and starts every
// host of a system at once for each round. The systems:
//
//   - rolloutdb-fleet: --hosts host processes (4), each opening one fleet
//     workspace through the facade (rolloutdb.Open of a postgres:// DSN
//     with ?workspace=, FleetOptions.HostName host-N), Turn.Add per
//     record, as the rolloutdb system does locally. Its index (package
//     fleet/pgindex: list, search words) is PostgreSQL's work too.
//   - fleet-log: package fleet's Log alone in the same host processes
//     (Thread.Append of one record), without the facade's index: the
//     log's cost apart from the facade's, as rollout-writer is locally.
//   - rolloutdb-local: the local engine (its journal, SyncAlways) on the
//     same workload, all threads in one process: a local workspace's
//     threads are one process's.
//   - naive-pg: a row per record, INSERTed in its own transaction
//     (autocommit), each thread on a connection of its own, over --hosts
//     processes.
//
// Unless --dsn names a database, rolloutbench starts a throwaway
// PostgreSQL of its own (internal/pgtest: Debian's postgresql-15 under
// /usr/lib/postgresql, run as the user postgres when root, fsync and
// synchronous_commit on), bound with every backend to --pg-cpus (CPU 0 on
// a machine of two or more), the host processes to --host-cpus (the
// others); "all" leaves either unbound. With --dsn the workspace
// rolloutbench-<time> (and -log), and the table rolloutbench_naive_<time>,
// stay in that database (<time>: the start's time and the pid). Per
// system, beside records/s and p50/p99:
//
//   - settled_records_per_sec: the records over the time until the
//     system's work after acknowledging was done too (the facade's index).
//   - frames_per_commit: the frames each commit round (fleet) or journal
//     commit (local) made durable.
//   - pg_cpu_us_per_record: CPU the server's processes used per record
//     (own cluster only, from /proc, 10 ms ticks); with PostgreSQL on one
//     core, 1,000,000 over it is the rate that core could sustain.
//   - host_cpu_us_per_record: the host processes' CPU per record.
//
// Every system's records are read back after the run (the fleet's through
// package fleet, the local rollouts from disk, the naive rows in SQL) and
// checked against what each thread was acknowledged. rolloutdb_advantage
// is the fleet's (rolloutdb-fleet, or fleet-log when the facade sits out)
// over each system. --round-window sets the fleet hosts'
// FleetOptions.RoundWindow; --cpuprofile also makes each host write its
// profile (<file>.<system>.<host>); --pg-statements N prints the N
// statements that took the own server longest (pg_stat_statements).
//
// Usage:
//
//	go run ./cmd/rolloutbench              # default sizes, a table
//	go run ./cmd/rolloutbench --quick      # under a minute
//	go run ./cmd/rolloutbench --json       # one JSON document on stdout
//	go run ./cmd/rolloutbench --quick --scenarios append \
//	    --systems rolloutdb,rollout-writer,jsonl-fsync   # where the append time goes
//	go run ./cmd/rolloutbench --fleet      # 64 threads over 4 host processes, PostgreSQL on CPU 0
//	go run ./cmd/rolloutbench --fleet --pg-cpus all --host-cpus all   # nothing pinned
//	go run ./cmd/rolloutbench --fleet --dsn 'postgres://u@db/bench'   # a server of yours
package main
