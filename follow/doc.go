// Package follow owns live reading of a workspace: followers, which yield
// a thread's records as they become durable, and the workspace watch,
// which tells a client's sidebar which threads changed. It is in the shape
// of Prometheus' wlog.LiveReader and Watcher: a reader that returns what
// can be read now and goes on from there at its next call, woken by a
// notice of a write and, when none comes, by a ticker.
//
// A Hub serves the followers and watchers of one DB (one handle on a
// workspace). It keeps, for each thread followed or written through that
// DB, a stream: what the DB knows to be durable of the thread's rollout
// (its file id and a durable end) and the latest durable frames, which
// followers take from memory, without reading the file. The stream is
// fed from one of two places, never both at once:
//
//   - the ordered publish of the DB that writes the thread: the facade
//     hands each published frame to the thread's Publisher, in frame
//     order, once its writer acknowledged it;
//   - a tailer, while the thread is followed here and written elsewhere
//     (by another process, or another DB on the workspace): the live
//     reader of its rollout, woken by file-change notification of the
//     thread directories (fsnotify) and, as a fallback, by a ticker.
//
// A follower behind what the stream keeps reads the rollout itself, up to
// what is known durable, then takes the stream's frames again.
//
// A record is yielded only once it is durable. A frame of another
// process's rollout is durable once it is covered: a later frame's header
// records a durable offset past its end (the writer's journal or fsync had
// made the file durable that far when it wrote that frame), or the tailer
// synced the file past it. The last frames of a rollout are covered by no
// later frame until the writer writes again; the tailer syncs the file
// (fdatasync) once its first uncovered frame has stayed uncovered for
// tailWait, so that a writer that streams, each frame covering the one
// before, is never synced by its followers, and one that stopped is
// synced once.
//
// A move of the rollout (archive, restore), its deletion, a repair that
// writes a new file, and a thread created again under the same id reach
// the stream as a move: from the facade for what its DB does, from the
// directory notification or the tailer's polling for what others do. Each
// follower then looks where the rollout is and checks that it still holds,
// where it was, the last frame the follower read.
//
// The package never imports the facade; the facade wires a Hub at Open
// and hands it the frames it publishes.
package follow
