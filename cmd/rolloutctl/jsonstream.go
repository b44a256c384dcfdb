package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
)

// jsonStream writes one indented JSON object (as printJSON would) field by
// field, and an array field element by element, so that a document as
// large as a thread's whole history is never whole in memory: replay and
// export hold the thread's state, and the output costs a buffer.
type jsonStream struct {
	w      *bufio.Writer
	fields int
	err    error
}

func newJSONStream(w io.Writer) *jsonStream {
	s := &jsonStream{w: bufio.NewWriterSize(w, 256<<10)}
	s.raw([]byte("{"))
	return s
}

func (s *jsonStream) raw(b []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(b)
	}
}

func (s *jsonStream) value(v any, prefix string) {
	if s.err != nil {
		return
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent(prefix, "  ")
	if s.err = enc.Encode(v); s.err == nil {
		s.raw(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	}
}

func (s *jsonStream) key(name string) {
	if s.fields > 0 {
		s.raw([]byte(","))
	}
	s.fields++
	s.raw([]byte("\n  "))
	s.value(name, "  ")
	s.raw([]byte(": "))
}

// field writes one field.
func (s *jsonStream) field(name string, v any) {
	s.key(name)
	s.value(v, "  ")
}

// array writes a field holding n elements, each made by elem when it is
// written (and free to be collected after).
func (s *jsonStream) array(name string, n int, elem func(i int) any) {
	_ = s.stream(name, func(emit func(any)) error {
		for i := range n {
			emit(elem(i))
		}
		return nil
	})
}

// stream writes a field holding the elements each hands to emit, written
// as they come (as array writes them): for a sequence whose length is
// known only at its end.
func (s *jsonStream) stream(name string, each func(emit func(v any)) error) error {
	s.key(name)
	n := 0
	err := each(func(v any) {
		if n == 0 {
			s.raw([]byte("["))
		} else {
			s.raw([]byte(","))
		}
		n++
		s.raw([]byte("\n    "))
		s.value(v, "    ")
	})
	if n == 0 {
		s.raw([]byte("[]"))
	} else {
		s.raw([]byte("\n  ]"))
	}
	return err
}

// close ends the object and flushes.
func (s *jsonStream) close() error {
	s.raw([]byte("\n}\n"))
	if s.err == nil {
		s.err = s.w.Flush()
	}
	return s.err
}
