// Package jsonstr writes JSON strings byte for byte as encoding/json does
// (HTML-safe, invalid UTF-8 as U+FFFD), but in pieces: the escaped length
// of a string is known before it is built, and a long string is streamed
// through a small buffer instead of being escaped into one. A guest's
// output or a reply body of control characters grows sixfold when escaped
// (\u0001); the daemon sizes it first and never holds that form whole.
package jsonstr

import (
	"io"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// escapeLen is the escaped length of each ASCII byte.
var escapeLen = func() (t [utf8.RuneSelf]uint8) {
	for b := range t {
		switch {
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			t[b] = 2
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			t[b] = 6 // \u00XX
		default:
			t[b] = 1
		}
	}
	return t
}()

// Text is what this package encodes: a string, or bytes taken as one.
type Text interface{ ~string | ~[]byte }

// decodeRune decodes the character at the start of s. Only its first bytes
// are converted: for bytes, a conversion that small stays on the stack.
func decodeRune[S Text](s S) (rune, int) {
	return utf8.DecodeRuneInString(string(s[:min(len(s), utf8.UTFMax)]))
}

// Len returns the length of s encoded as a JSON string, quotes included.
func Len[S Text](s S) int {
	n := 2
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			n += int(escapeLen[b])
			i++
			continue
		}
		c, size := decodeRune(s[i:])
		switch {
		case c == utf8.RuneError && size == 1, c == '\u2028', c == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// Append appends s encoded as a JSON string, quotes included, to dst.
func Append[S Text](dst []byte, s S) []byte {
	dst = append(dst, '"')
	dst = appendBody(dst, s)
	return append(dst, '"')
}

// appendBody appends the escaped characters of s, without quotes.
func appendBody[S Text](dst []byte, s S) []byte {
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if escapeLen[b] == 1 {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		c, size := decodeRune(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			start = i + size
		case c == '\u2028' || c == '\u2029':
			// Valid JSON, but not valid JavaScript source: encoding/json
			// escapes them, and so must an identical encoding.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xf])
			start = i + size
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// chunk is how much of a string Write escapes at a time: at most six times
// this is buffered.
const chunk = 16 << 10

// Write writes s encoded as a JSON string, quotes included, to w, escaping
// it a chunk at a time. The bytes written are Append's.
func Write[S Text](w io.Writer, s S) error {
	return writeChunked(w, s, chunk)
}

// writeChunked is Write with chunks of size bytes, at least utf8.UTFMax.
func writeChunked[S Text](w io.Writer, s S, size int) error {
	buf := make([]byte, 0, 6*size+8)
	buf = append(buf, '"')
	for len(s) > 0 {
		n := cut(s, size)
		buf = appendBody(buf, s[:n])
		s = s[n:]
		if len(s) == 0 {
			break
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	buf = append(buf, '"')
	_, err := w.Write(buf)
	return err
}

// cut returns where to end a chunk of at most size bytes of s: before a
// character's first byte, so that no valid sequence is split (its halves
// would be escaped as invalid bytes). When none of the last bytes starts a
// character, no valid sequence crosses size either.
func cut[S Text](s S, size int) int {
	if len(s) <= size {
		return len(s)
	}
	for n := size; n > 0 && n > size-utf8.UTFMax; n-- {
		if utf8.RuneStart(s[n]) {
			return n
		}
	}
	return size
}
