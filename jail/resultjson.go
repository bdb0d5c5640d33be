package jail

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/jsonstr"
)

// outputMembers is how json.Marshal writes a result with empty output: the
// two members WriteJSON streams instead.
const outputMembers = `,"stdout":"","stderr":""`

// WriteJSON writes r to w byte for byte as json.Marshal does, except that
// the output strings are escaped and written a piece at a time: a guest's
// output of control characters is six times its size escaped, and the
// daemon must not hold that whole (nor a second copy of the output) to
// answer. The rest of the result is bounded by the ceiling (the value by
// the frame cap, the logs by the log budget) and is encoded as usual.
func WriteJSON(w io.Writer, r *Result) error {
	rest := *r
	rest.Stdout, rest.Stderr = "", ""
	b, err := json.Marshal(&rest)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	at := topLevelIndex(b, outputMembers)
	if at < 0 {
		return errors.New("encode result: no stdout and stderr members") // the struct lost its fields
	}
	if _, err := w.Write(b[:at]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, `,"stdout":`); err != nil {
		return err
	}
	if err := writeOutput(w, r.Stdout, r.Encoding.Stdout); err != nil {
		return err
	}
	if _, err := io.WriteString(w, `,"stderr":`); err != nil {
		return err
	}
	if err := writeOutput(w, r.Stderr, r.Encoding.Stderr); err != nil {
		return err
	}
	_, err = w.Write(b[at+len(outputMembers):])
	return err
}

// writeOutput writes a stream as a JSON string: escaped, or, when its
// encoding says so, in base64 a piece at a time (a copy of a piece, never
// of the whole).
func writeOutput(w io.Writer, s, encoding string) error {
	if encoding != api.EncodingBase64 {
		return jsonstr.Write(w, s)
	}
	if _, err := io.WriteString(w, `"`); err != nil {
		return err
	}
	enc := base64.NewEncoder(base64.StdEncoding, w)
	const piece = 48 << 10 // a multiple of 3: no padding inside
	for i := 0; i < len(s); i += piece {
		if _, err := enc.Write([]byte(s[i:min(i+piece, len(s))])); err != nil {
			return err
		}
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := io.WriteString(w, `"`)
	return err
}

// topLevelIndex returns where in the compact JSON object b the member text
// sub starts at the object's own level (not inside a string or a nested
// value, such as a guest's returned value that has a "stdout" key), or -1.
func topLevelIndex(b []byte, sub string) int {
	depth := 0
	var text jsonstr.Outside
	for i, c := range b {
		if !text.Next(c) {
			continue
		}
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 && bytes.HasPrefix(b[i:], []byte(sub)) {
				return i
			}
		}
	}
	return -1
}
