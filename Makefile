# rolloutdb. `make test` is what CI runs (.ci/run); keep it under 10 minutes
# on 2 cores.
GO        ?= go
PKGS      := ./...
# The short run is a count of executions, not a duration: on go1.26 a
# duration can end in a spurious "context deadline exceeded" failure when a
# worker is busy at the deadline (go.dev/issue/75804, fixed in go1.27).
# 8000 executions take a few seconds for each target here.
FUZZTIME  ?= 8000x
LONGFUZZ  ?= 10m
# Every fuzz target, as package:Target.
FUZZ_TARGETS := ./rollout:FuzzReader ./rollout:FuzzDecodeFrame ./rollout:FuzzDecodeBody ./rollout:FuzzItemDecoder ./rollout:FuzzItemEncoder ./journal:FuzzJournalReplay ./recovery:FuzzResume ./projection:FuzzQueryText ./projection:FuzzCursor ./artifacts:FuzzPaths ./importer:FuzzReadClaudeCode ./importer:FuzzReadCodex ./importer:FuzzReadCraftAgents ./importer:FuzzReadDotCraft ./importer:FuzzJSONScan

# The crash harness: a short run in `make test`, a long one by `make crash`;
# the fleet mode (on PostgreSQL) as well, an iteration of each fault.
CRASH_SHORT ?= --iterations 3
CRASH_LONG  ?= --iterations 200
FLEET_CRASH_SHORT ?= --fleet --iterations 5
FLEET_CRASH_LONG  ?= --fleet --iterations 1000

# The PostgreSQL server the fleet engine's tests start throwaway clusters
# of (internal/pgtest): Debian's package, installed by `make deps`.
PG_VERSION ?= 15
PG_INITDB  := /usr/lib/postgresql/$(PG_VERSION)/bin/initdb

.PHONY: all build deps test vet fmt-check staticcheck unit example-prometheus fuzz-short crash-short fuzz bench bench-compare crash demo clean

all: build test

build:
	$(GO) build $(PKGS)

test: deps vet fmt-check staticcheck unit example-prometheus fuzz-short crash-short

# What the tests need beyond Go: PostgreSQL, installed once when its initdb
# is missing (apt-get update only if the install fails, as a fresh
# machine's package lists may be stale or empty); as root, or through sudo.
# Debian's package may create and start a "main" cluster on port 5432: the
# tests' clusters use free ports of their own and never touch it.
deps:
	@if [ ! -x $(PG_INITDB) ]; then \
		if [ "$$(id -u)" = 0 ]; then sudo=; \
		elif command -v sudo >/dev/null 2>&1; then sudo=sudo; \
		else echo "make deps: $(PG_INITDB) is missing; install postgresql-$(PG_VERSION) as root" >&2; exit 1; fi; \
		install="$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-$(PG_VERSION)"; \
		echo "make deps: installing postgresql-$(PG_VERSION)"; \
		$$install || { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update && $$install; }; \
	fi

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

staticcheck:
	$(GO) tool staticcheck $(PKGS)

unit: deps
	$(GO) test -race -count=1 -timeout 8m $(PKGS)

# The Prometheus example is its own module (the library does not depend on
# the OpenTelemetry SDK): vet it, and check that one turn's metrics reach
# the exporter's page.
example-prometheus:
	cd examples/prometheus && $(GO) vet ./... && $(GO) run . -once | grep -q '^rolloutdb_appends_records_total.* 5$$'

# Each fuzz target for a few seconds: enough to replay the seed corpus and
# explore a little on every run.
fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1s $$pkg; \
	done

# Every crash-harness mode (kill, power loss, faults, two processes; then
# the fleet's host processes on PostgreSQL) for a few iterations, with a new seed each run (printed: rerun a failure with
# go run ./cmd/rolloutcrash --seed N).
crash-short: deps
	$(GO) run ./cmd/rolloutcrash $(CRASH_SHORT)
	$(GO) run ./cmd/rolloutcrash $(FLEET_CRASH_SHORT)

crash: deps
	$(GO) run ./cmd/rolloutcrash $(CRASH_LONG)
	$(GO) run ./cmd/rolloutcrash $(FLEET_CRASH_LONG)

# Long fuzzing, by hand or nightly: make fuzz LONGFUZZ=1h (or a count,
# LONGFUZZ=5000000x, which go1.26's deadline race cannot fail)
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(LONGFUZZ) $$pkg; \
	done

# Benchmarks with their same-run baselines (see docs/BENCHMARKS.md).
bench:
	$(GO) test -run '^$$' -bench 'DurableAppend|AppendNoSync' -benchtime 3000x ./rollout
	$(GO) test -run '^$$' -bench 'Read|OpenLongThread' -benchtime 10x ./rollout
	$(GO) test -run '^$$' -bench 'Replay|Resume100k' -benchtime 3x ./recovery
	$(GO) test -run '^$$' -bench 'List|Search|TurnsPage' -benchtime 20x -timeout 60m ./projection
	ROLLOUTDB_BENCH_THREADS=2000 $(GO) test -run '^$$' -bench 'Rebuild' -benchtime 2x -timeout 30m ./projection
	$(GO) test -run '^$$' -bench 'ArchiveRestore10k' -benchtime 3x .
	$(GO) test -run '^$$' -bench 'PerThreadAtScale' -benchtime 20x .   # ROLLOUTDB_BENCH_SCALE_THREADS=100000 for the 100,000-thread figure

# rolloutdb against JSONL+fsync, rewrite-per-save, SQLite and pebble, side by side
# (docs/BENCHMARKS.md). Add ARGS=--quick for a run under a minute, or
# ARGS=--json for the machine-readable form.
bench-compare:
	$(GO) run ./cmd/rolloutbench $(ARGS)

# The main job: a demo workspace and a look at it.
demo:
	rm -rf ./demo && $(GO) run ./cmd/rolloutctl demo -w ./demo

clean:
	rm -rf ./demo
