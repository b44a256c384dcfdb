// Package rolloutdb persists AI-agent conversations ("threads") for a host
// process that runs agent turns for one workspace.
//
// Every change to a thread is a record appended to that thread's rollout
// file under <workspace>/.craft/threads/ (see package rollout and
// docs/FORMAT.md); the rollout is the authority. A host opens the workspace,
// creates or opens threads, and writes turns:
//
//	db, err := rolloutdb.Open(ctx, workspaceDir, rolloutdb.Options{})
//	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{})
//	turn, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: "fix the bug"})
//	_, err = turn.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "..."})
//	_, err = turn.Commit(ctx, rolloutdb.Commit{Items: finalItems, ModelHistory: msgs})
//
// Each call returns once its records are durable under the chosen
// rollout.SyncPolicy (SyncAlways by default: concurrent appends share one
// fdatasync). A turn's commit (its final items, exact model history and an
// optional checkpoint) is one frame: after a crash it is there whole or not
// at all.
//
// Beside the turns, a host rolls threads back (Thread.Rollback) and renames,
// labels and flags them (Thread.UpdateMetadata); clients follow a thread
// live (DB.Follow: every record once durable, from this process's appends
// or another's) and the workspace's threads (DB.Watch); Metrics, and
// Options.MeterProvider for OpenTelemetry, count what the DB does; Business
// holds the state the rollouts do not (goals, plans, edges, the mailbox).
// In a fleet workspace an append can commit some of it with its frame,
// both or neither (BusinessWrites); a local workspace refuses that.
//
// This package is the facade: it wires the packages below it and owns what
// spans them. No package of the module imports it.
package rolloutdb
