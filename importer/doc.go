// Package importer reads other agent tools' session files and converts
// them into the records of rolloutdb threads. It owns the formats of those
// files and the conversion; it writes nothing (rolloutdb.DB.Import appends
// what a Plan says, through the public Thread calls) and imports nothing
// of this module but rollout.
//
// # Reading
//
// Open reads a session file of a named format until the session's identity
// is known; a Reader then hands out its turns one by one, in the shape of
// bufio.Scanner (Next, Turn, Err). Codex and Claude Code files are
// streamed, so a reader holds about one turn whatever the size of the
// file; craft-agents files (rewritten whole on every save), DotCraft files
// (a log that replaces turns in place) and a Codex file that rolls turns
// back are read whole at the first Next. Read reads a whole file into a
// Session. Formats:
//
//   - claude-code: Claude Code's ~/.claude/projects/<dir>/<session>.jsonl
//     transcripts, with their subagents (sidechain lines, and the
//     <session>/subagents/agent-*.jsonl files beside them);
//   - codex: Codex's ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, the
//     wrapped format and the older bare one;
//   - craft-agents: {workspace}/sessions/{id}/session.jsonl;
//   - dotcraft: .craft/threads/active/*.jsonl and threads/archived/.
//
// Each reader's file says which record types and fields it reads, which
// it ignores, and where they are defined.
//
// # The report
//
// Damage never stops a read. What a read finds besides turns is the
// session's Report, in four parts kept apart:
//
//   - Damaged: a line that is not JSON, is cut off, is longer than 64 MiB,
//     or is of a known type with a field that does not read; each with its
//     line and the field. Something is lost: rolloutctl import exits 1.
//   - Unknown: a record type this version does not know, counted by type,
//     with the first line of each: a newer version of the tool wrote it.
//   - Ignored: the lines of types known to carry nothing a thread keeps
//     (progress, settings, undo snapshots, events that repeat an item),
//     counted by type.
//   - Notes: what the import does otherwise than the source: a last turn
//     still being written left for a later import (ActiveWindow), a
//     session archived in its tool imported active, a message cut to fit a
//     record (Lost).
//
// A file that is not of the named format at all is refused
// (ErrWrongFormat).
//
// # Sessions, turns, ids
//
// A user's prompt starts a turn; messages, reasoning, tool calls and
// their results (failed ones as failed), web and tool searches, and
// errors are its items; each turn keeps the source's timestamps, token
// usage, settings (Turn.Metadata: a Codex turn's cwd, effort, approval
// and sandbox policy) and, where the source keeps it, its exact model
// history (the provider messages, as stored). The thread id is a prefix
// (cc-, cx-, ca-, dc-) and the source's session id reduced to [a-z0-9_-]
// (ThreadID); one too long ends in - and 16 hex digits of the id's
// SHA-256. A subagent's source id is <session>/<agent> (Claude Code's
// agent id, craft-agents' Task call id); Codex and DotCraft subagents
// have their own ids and name their parent. Turn, item and checkpoint ids
// are derived from the source (t-<id>, u-/a-/r-/c-/o-/e-<id>, k-<id>),
// so that a later import compares ids to know what is there: a Codex
// turn's from its prompt's line number and a digest of the line.
//
// # The records of an import
//
// A Plan compares a session, turn by turn, with what its thread holds
// (Thread) and says what to append. An import writes ordinary records:
//
//   - thread_opened: source {kind "import", client: the format}, or
//     {kind "subagent", client, parent, root, depth} for a subagent;
//     created is the source session's; metadata holds import_format,
//     import_source_id and import_path.
//   - Turns whole, as many to a frame as fit in 4 MiB of bodies (a larger
//     turn in frames of up to 4 MiB, its end record in the last; one fsync
//     a frame). Each turn: turn_started (the model, the settings as its
//     metadata), its item_appended, model_history_appended records of at
//     most 4 MiB of messages each (none for a turn with a message over 12
//     MiB: resume rebuilds it from the items), a checkpoint (trigger
//     post_turn) if the source compacted in or after the turn (left out,
//     and noted, if over 12 MiB), and turn_completed with the usage, or
//     turn_aborted (a turn the source aborted: DotCraft's failed and
//     cancelled turns, Codex's interrupted ones). Record times are the
//     source's: the turn's start, and its last activity for the rest.
//   - A compaction found after the last turn imported before is a
//     checkpoint frame of its own (trigger manual), before the new turns.
//     A checkpoint's replacement history is the source's summary as its
//     provider messages (Claude Code's summary message, Codex's
//     replacement_history items or its summary as a user message,
//     DotCraft's replacementHistory), followed, for a compaction inside a
//     turn, by the turn's messages after it (the checkpoint covers the
//     whole turn). A source whose compaction leaves only a notice
//     (craft-agents, older DotCraft files) gets no checkpoint.
//   - The source's rollback of turns imported before (DotCraft, Codex's
//     thread_rolled_back) is a thread_rolled_back of that many turns, when
//     they are the thread's last ones.
//   - metadata_updated with the source's name, labels, flags and status,
//     at the session's last activity, when they differ from the thread's:
//     the source's say wins; a label it dropped, or a status it cleared,
//     stays.
//
// A turn already in the thread is not changed, even if the source added
// to it since (a last turn still being written waits instead). The
// thread's turns must be the session's first ones: a session that has
// grown gets its new turns, one whose turns are the first of the thread's
// (an earlier snapshot, a copy) gets nothing, and one that went another
// way is refused (ErrDiverged, nothing written): another file of the
// session that diverged, or turns a host added to the imported thread.
// rolloutctl import reads the files of one session together: the one
// with the most turns is imported, a prefix of it is also read, and one
// that diverges is refused, naming both.
package importer
