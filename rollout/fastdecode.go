package rollout

// Bodies of the hot kinds (items, on every page of history and every
// replay) are decoded by hand here, without msgpack's reflection. The
// hand decoder takes only the shapes the encoder writes (a map of known
// keys, strings, integers, nil); anything else (an unknown field, a
// string as bin, a float size) makes it give up, and Record.Decode falls
// back to the msgpack library, so what a body decodes to never depends on
// which decoder ran. They run before checkMsgpack, so each bounds what it
// reads itself: every length and count is checked against the bytes left
// (a count claims at least one byte an element) before anything is
// allocated, so what they allocate stays proportional to the body (at
// most a slice header an input byte), and nesting is fixed by the shape.

// decodeItemFast decodes an item body into it (the zero Item); false: not
// a shape it takes, and it is left to the library (it may be half set).
func decodeItemFast(b []byte, it *Item) bool {
	// One copy of the body as a string, and each field a substring of
	// it: one allocation for all the item's strings.
	whole := string(b)
	str := func(b []byte) (string, []byte, bool) {
		if len(b) > 0 && b[0] == 0xc0 {
			return "", b[1:], true
		}
		v, rest, ok := readStr(b)
		if !ok {
			return "", nil, false
		}
		at := len(whole) - len(rest) - len(v)
		return whole[at : at+len(v)], rest, true
	}
	rest, ok := readMap(b, func(key, b []byte) (rest []byte, ok bool) {
		switch string(key) {
		case "id":
			it.ID, rest, ok = str(b)
		case "type":
			var s string
			s, rest, ok = str(b)
			it.Type = ItemType(s)
		case "status":
			it.Status, rest, ok = str(b)
		case "text":
			it.Text, rest, ok = str(b)
		case "call_id":
			it.CallID, rest, ok = str(b)
		case "name":
			it.Name, rest, ok = str(b)
		case "arguments":
			it.Arguments, rest, ok = str(b)
		case "ref":
			it.Ref, rest, ok = readRef(b)
		case "data":
			it.Data, rest, ok = readStrMap(b)
		}
		return rest, ok // an unknown key: not ok
	})
	return ok && len(rest) == 0
}

// readMap reads a map whose keys are strings, handing each value to
// field, which returns what follows it; false: not a shape the hand
// decoders take.
func readMap(b []byte, field func(key, b []byte) ([]byte, bool)) ([]byte, bool) {
	n, b, ok := readMapLen(b)
	if !ok {
		return nil, false
	}
	for range n {
		var key []byte
		if key, b, ok = readStr(b); !ok {
			return nil, false
		}
		if b, ok = field(key, b); !ok {
			return nil, false
		}
	}
	return b, true
}

func readRef(b []byte) (*ArtifactRef, []byte, bool) {
	if len(b) > 0 && b[0] == 0xc0 {
		return nil, b[1:], true
	}
	ref := &ArtifactRef{}
	rest, ok := readMap(b, func(key, b []byte) (rest []byte, ok bool) {
		switch string(key) {
		case "path":
			ref.Path, rest, ok = readStrOrNil(b)
		case "sha256":
			ref.SHA256, rest, ok = readStrOrNil(b)
		case "size":
			if len(b) > 0 && b[0] == 0xc0 {
				return b[1:], true
			}
			var err error
			ref.Size, rest, err = readInt(b)
			ok = err == nil
		}
		return rest, ok
	})
	if !ok {
		return nil, nil, false
	}
	return ref, rest, true
}

func readStrMap(b []byte) (map[string]string, []byte, bool) {
	if len(b) > 0 && b[0] == 0xc0 {
		return nil, b[1:], true
	}
	n, b, ok := readMapLen(b)
	if !ok {
		return nil, nil, false
	}
	m := make(map[string]string, n)
	for range n {
		var k, v []byte
		if k, b, ok = readStr(b); !ok {
			return nil, nil, false
		}
		if v, b, ok = readStr(b); !ok {
			return nil, nil, false
		}
		m[string(k)] = string(v)
	}
	return m, b, true
}

// readMapLen reads a map header; the count is bounded by the bytes left
// (each entry takes at least two).
func readMapLen(b []byte) (int, []byte, bool) {
	if len(b) < 1 {
		return 0, nil, false
	}
	var n uint64
	var ok bool
	switch c := b[0]; {
	case c&0xf0 == 0x80:
		n, b, ok = uint64(c&0x0f), b[1:], true
	case c == 0xde:
		n, b, ok = readLen(b[1:], 2)
	case c == 0xdf:
		n, b, ok = readLen(b[1:], 4)
	}
	if !ok || n > uint64(len(b))/2 {
		return 0, nil, false
	}
	return int(n), b, true
}

func readStr(b []byte) ([]byte, []byte, bool) {
	v, rest, err := readStrBin(b, false)
	return v, rest, err == nil
}

func readStrOrNil(b []byte) (string, []byte, bool) {
	if len(b) > 0 && b[0] == 0xc0 {
		return "", b[1:], true
	}
	v, rest, ok := readStr(b)
	return string(v), rest, ok
}

func zeroItem(it *Item) bool {
	return it.ID == "" && it.Type == "" && it.Status == "" && it.Text == "" && it.CallID == "" && it.Name == "" &&
		it.Arguments == "" && it.Ref == nil && it.Data == nil
}

func decodeTurnStartedFast(b []byte, v *TurnStarted) bool {
	rest, ok := readMap(b, func(key, b []byte) (rest []byte, ok bool) {
		switch string(key) {
		case "model":
			v.Model, rest, ok = readStrOrNil(b)
		case "metadata":
			v.Metadata, rest, ok = readStrMap(b)
		}
		return rest, ok
	})
	return ok && len(rest) == 0
}

func decodeTurnCompletedFast(b []byte, v *TurnCompleted) bool {
	rest, ok := readMap(b, func(key, b []byte) (rest []byte, ok bool) {
		switch string(key) {
		case "status":
			v.Status, rest, ok = readStrOrNil(b)
		case "usage":
			rest, ok = readUsage(b, &v.Usage)
		}
		return rest, ok
	})
	return ok && len(rest) == 0
}

func readUsage(b []byte, u *Usage) ([]byte, bool) {
	return readMap(b, func(key, b []byte) ([]byte, bool) {
		var f *int64
		switch string(key) {
		case "input":
			f = &u.InputTokens
		case "cached_input":
			f = &u.CachedInputTokens
		case "output":
			f = &u.OutputTokens
		case "reasoning":
			f = &u.ReasoningTokens
		case "total":
			f = &u.TotalTokens
		default:
			return nil, false
		}
		var err error
		*f, b, err = readInt(b)
		return b, err == nil
	})
}

func decodeModelHistoryFast(b []byte, v *ModelHistory) bool {
	rest, ok := readMap(b, func(key, b []byte) (rest []byte, ok bool) {
		if string(key) == "messages" {
			v.Messages, rest, ok = readBinArray(b)
		}
		return rest, ok
	})
	return ok && len(rest) == 0
}

// readBinArray reads an array of bin values, each copied (the library
// copies too: a body's bytes may be a reader's buffer).
func readBinArray(b []byte) ([][]byte, []byte, bool) {
	if len(b) < 1 {
		return nil, nil, false
	}
	if b[0] == 0xc0 {
		return nil, b[1:], true
	}
	var n uint64
	var ok bool
	switch c := b[0]; {
	case c&0xf0 == 0x90:
		n, b, ok = uint64(c&0x0f), b[1:], true
	case c == 0xdc:
		n, b, ok = readLen(b[1:], 2)
	case c == 0xdd:
		n, b, ok = readLen(b[1:], 4)
	}
	if !ok || n > uint64(len(b)) {
		return nil, nil, false
	}
	out := make([][]byte, n)
	for i := range out {
		if len(b) > 0 && b[0] == 0xc0 {
			b = b[1:]
			continue
		}
		v, rest, err := readStrBin(b, true)
		if err != nil {
			return nil, nil, false
		}
		out[i] = append([]byte{}, v...)
		b = rest
	}
	return out, b, true
}

// decodeFast decodes the hot kinds' bodies into v by hand; false leaves
// v (reset to zero) to the library.
func decodeFast(b []byte, v any) bool {
	switch v := v.(type) {
	case *Item:
		if !zeroItem(v) {
			return false
		}
		if decodeItemFast(b, v) {
			return true
		}
		*v = Item{}
	case *TurnStarted:
		if v.Model != "" || v.Metadata != nil {
			return false
		}
		if decodeTurnStartedFast(b, v) {
			return true
		}
		*v = TurnStarted{}
	case *TurnCompleted:
		if *v != (TurnCompleted{}) {
			return false
		}
		if decodeTurnCompletedFast(b, v) {
			return true
		}
		*v = TurnCompleted{}
	case *ModelHistory:
		if v.Messages != nil {
			return false
		}
		if decodeModelHistoryFast(b, v) {
			return true
		}
		*v = ModelHistory{}
	}
	return false
}
