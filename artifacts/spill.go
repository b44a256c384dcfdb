package artifacts

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// ToolResult is what an item keeps of a tool's output.
type ToolResult struct {
	// Preview is the output itself when it is small, or its head and tail
	// lines (capped in bytes) with an omission marker between them.
	Preview string
	// Ref is set when the output was spilled to a file.
	Ref *Ref
}

// SpillToolResult keeps a tool's output: small outputs stay in the item,
// larger ones are written to tool-results/<thread>/<call>.out (create-new:
// a retried call finds its own file, different bytes get a new name) and
// the item keeps a preview and the reference.
func (s *Store) SpillToolResult(thread, call string, output []byte) (ToolResult, error) {
	if len(output) <= s.opts.SpillAbove {
		return ToolResult{Preview: string(output)}, nil
	}
	if err := checkName("thread", thread); err != nil {
		return ToolResult{}, err
	}
	if err := checkName("call", call); err != nil {
		return ToolResult{}, err
	}
	if int64(len(output)) > s.opts.MaxArtifact {
		return ToolResult{}, fmt.Errorf("%w: tool output of %d bytes (limit %d)", ErrTooLarge, len(output), s.opts.MaxArtifact)
	}
	path, err := s.createNew(filepath.Join(s.root, ToolResultsDir, thread), call, ".out", output)
	if err != nil {
		return ToolResult{}, err
	}
	return ToolResult{
		Preview: Preview(output, s.opts.PreviewLines, s.opts.PreviewBytes),
		Ref:     &Ref{Path: s.rel(path), Size: int64(len(output)), SHA256: digest(output)},
	}, nil
}

// Preview keeps the first and last lines lines of b, at most maxBytes in
// all (half for the head, half for the tail), with a marker saying what
// was left out. It never splits a UTF-8 character.
func Preview(b []byte, lines, maxBytes int) string {
	text := strings.ToValidUTF8(string(b), "\uFFFD")
	all := strings.SplitAfter(text, "\n")
	if len(all) > 0 && all[len(all)-1] == "" {
		all = all[:len(all)-1]
	}
	if len(all) <= 2*lines && len(text) <= maxBytes {
		return text
	}
	half := maxBytes / 2
	head := capFront(strings.Join(all[:min(lines, len(all))], ""), half)
	tailStart := max(len(all)-lines, min(lines, len(all)))
	tail := capBack(strings.Join(all[tailStart:], ""), half)
	omitted := len(text) - len(head) - len(tail)
	if omitted <= 0 {
		return head + tail
	}
	return fmt.Sprintf("%s\n[… %d bytes, %d lines omitted …]\n%s", strings.TrimRight(head, "\n"), omitted,
		max(0, strings.Count(text, "\n")-strings.Count(head, "\n")-strings.Count(tail, "\n")), tail)
}

// capFront keeps at most n bytes of the start of s.
func capFront(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// capBack keeps at most n bytes of the end of s.
func capBack(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
