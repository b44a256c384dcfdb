package fleet

import (
	"strconv"
	"strings"
)

// A notice is what hosts tell each other of a workspace's threads: one
// PostgreSQL notification on the workspace's channel (channelName), whose
// payload is tokens separated by single spaces:
//
//	<tid>:<end>      frames of thread tid committed; its frames end at end
//	<k><tid>:<id>    a lifecycle change of thread tid, named id: k is
//	                 c (created), a (archived), r (restored), d (deleted)
//	                 or m (moved to another location)
//	*                anything may have changed: look at every thread
//
// tid is the thread's key in the threads table, end a byte offset, both in
// decimal. Thread ids are of a-z, 0-9, '-' and '_' (rollout.ValidateThreadID),
// so they need no quoting. A notice is a wake-up, never the data: a
// follower reads the frames themselves, and a token it does not know it
// takes for "*".
//
// A payload stays under PostgreSQL's limit (8000 bytes) with maxNotice;
// what does not fit goes in further notices, up to maxNotices a flush,
// and past that one "*" stands for all of it.
const (
	maxNotice  = 7900
	maxNotices = 8
)

// channelName is the workspace's notification channel.
func channelName(ws int32) string { return "rolloutdb_ws_" + strconv.Itoa(int(ws)) }

// Lifecycle kinds of a change.
const (
	changeAppended = 0
	changeCreated  = 'c'
	changeArchived = 'a'
	changeRestored = 'r'
	changeDeleted  = 'd'
	changeMoved    = 'm'
)

// A change is one token of a notice.
type change struct {
	kind byte // changeAppended, or a lifecycle kind
	tid  int64
	end  int64  // changeAppended: where the thread's frames end
	id   string // a lifecycle change: the thread's id
}

// moveKind is the change a move to location to is.
func moveKind(to string) byte {
	switch to {
	case locArchived:
		return changeArchived
	case locActive:
		return changeRestored
	}
	return changeMoved
}

func (c change) appendTo(b []byte) []byte {
	if c.kind != changeAppended {
		b = append(b, c.kind)
	}
	b = strconv.AppendInt(b, c.tid, 10)
	b = append(b, ':')
	if c.kind == changeAppended {
		return strconv.AppendInt(b, c.end, 10)
	}
	return append(b, c.id...)
}

// notices writes changes as payloads of at most maxNotice bytes each; more
// than maxNotices of them become one "*".
func notices(changes []change) []string {
	var out []string
	var b []byte
	for _, c := range changes {
		n := len(b)
		if n > 0 {
			b = append(b, ' ')
		}
		b = c.appendTo(b)
		if len(b) > maxNotice {
			out = append(out, string(b[:n]))
			b = c.appendTo(b[:0])
			if len(out) == maxNotices {
				return []string{"*"}
			}
		}
	}
	if len(b) > 0 {
		out = append(out, string(b))
	}
	return out
}

// parseNotice reads a payload. all is true for "*", and for a payload
// with a token it cannot read (a newer host's): every thread is looked at.
func parseNotice(payload string) (changes []change, all bool) {
	for tok := range strings.FieldsSeq(payload) {
		c, ok := parseChange(tok)
		if !ok {
			return nil, true
		}
		changes = append(changes, c)
	}
	return changes, false
}

func parseChange(tok string) (change, bool) {
	var c change
	if tok[0] >= 'a' && tok[0] <= 'z' {
		c.kind, tok = tok[0], tok[1:]
		switch c.kind {
		case changeCreated, changeArchived, changeRestored, changeDeleted, changeMoved:
		default:
			return c, false
		}
	}
	tid, rest, ok := strings.Cut(tok, ":")
	if !ok {
		return c, false
	}
	var err error
	if c.tid, err = strconv.ParseInt(tid, 10, 64); err != nil {
		return c, false
	}
	if c.kind == changeAppended {
		c.end, err = strconv.ParseInt(rest, 10, 64)
		return c, err == nil
	}
	c.id = rest
	return c, rest != ""
}
