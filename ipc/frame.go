package ipc

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/pmjail/pmjail/internal/jsonstr"
)

// DefaultMaxFrame is the largest frame body either side accepts unless the
// operator's ceiling says otherwise.
const DefaultMaxFrame = 4 << 20

// MaxFrameDepth bounds how deeply a frame's JSON may nest. It is checked
// before any decoding so that a hostile frame of four million '[' costs one
// linear scan, not a recursive parse. Values inside a frame have the tighter
// MaxValueDepth.
const MaxFrameDepth = 128

// MaxValueDepth bounds the nesting of a value the guest hands over (a done
// value, call params, log meta).
const MaxValueDepth = 64

var (
	// ErrFrameTooLarge: a frame's length header exceeds the cap.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrProtocol: the peer broke the framing or message rules.
	ErrProtocol = errors.New("protocol error")
	// ErrTooDeep: a JSON value nests deeper than allowed.
	ErrTooDeep = errors.New("value nests too deeply")
)

const headerLen = 4

// FrameTooLargeError is ReadFrame's error for a frame whose header announces
// more than the cap. Nothing of the body has been read, so the reader is
// still at a known place in the stream and may skip the frame. It matches
// ErrFrameTooLarge.
type FrameTooLargeError struct {
	Length uint32 // the body length the header announced
	Max    int    // the cap
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("read frame: length %d over the %d-byte cap: %v", e.Length, e.Max, ErrFrameTooLarge)
}

func (e *FrameTooLargeError) Unwrap() error { return ErrFrameTooLarge }

// WriteFrame encodes v as JSON and writes it as one frame (in a single Write,
// so a frame is never interleaved with another writer's bytes when the
// caller serialises writes). A body over DefaultMaxFrame is refused.
func WriteFrame(w io.Writer, v any) error {
	buf, err := AppendFrame(nil, v, DefaultMaxFrame)
	if err != nil {
		return err
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// AppendFrame appends the frame encoding of v (length header and JSON body)
// to dst. A body over max bytes gives ErrFrameTooLarge.
func AppendFrame(dst []byte, v any, max int) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("encode frame: %w", err)
	}
	if len(body) > max {
		return dst, fmt.Errorf("encode frame: %d bytes over the %d-byte cap: %w", len(body), max, ErrFrameTooLarge)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...), nil
}

// ReadFrame reads one frame and returns its body, which is checked to be
// one UTF-8 JSON object nesting at most MaxFrameDepth levels. A clean end of
// stream before any header byte is io.EOF; a stream cut inside a frame is
// io.ErrUnexpectedEOF. The length is checked against max before anything is
// allocated, so a hostile header cannot make the reader reserve memory; a
// length over it is a *FrameTooLargeError.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("read frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, fmt.Errorf("read frame: zero length: %w", ErrProtocol)
	}
	if uint64(n) > uint64(max) {
		return nil, &FrameTooLargeError{Length: n, Max: max}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read frame body (%d bytes): %w", n, err)
	}
	if err := checkObject(body); err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	return body, nil
}

// validJSON is json.Valid, by a tokenizer ten times quicker on a megabyte
// (encoding/json's scanner steps a state machine per byte): any number of
// keys twice and invalid UTF-8 pass, as json.Valid lets them.
func validJSON(b []byte) bool {
	return jsontext.Value(b).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// checkObject verifies that b is one JSON object in valid UTF-8 whose
// nesting stays within MaxFrameDepth.
func checkObject(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("body is not valid UTF-8: %w", ErrProtocol)
	}
	if d := jsonDepth(b); d > MaxFrameDepth {
		return fmt.Errorf("body nests deeper than %d levels: %w: %w", MaxFrameDepth, ErrTooDeep, ErrProtocol)
	}
	if !validJSON(b) {
		return fmt.Errorf("body is not JSON: %w", ErrProtocol)
	}
	if firstNonSpace(b) != '{' {
		return fmt.Errorf("body is not a JSON object: %w", ErrProtocol)
	}
	return nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// jsonDepth returns the deepest nesting of arrays and objects in b, ignoring
// brackets inside strings. It does not validate b; it stops counting early
// once the depth passes MaxFrameDepth, the largest limit anyone asks about.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	var text jsonstr.Outside
	for _, c := range b {
		if !text.Next(c) {
			continue
		}
		switch c {
		case '[', '{':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > MaxFrameDepth {
					return deepest
				}
			}
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// checkValueDepth reports ErrTooDeep when raw nests deeper than MaxValueDepth.
func checkValueDepth(raw []byte) error {
	if jsonDepth(raw) > MaxValueDepth {
		return fmt.Errorf("nests deeper than %d levels: %w", MaxValueDepth, ErrTooDeep)
	}
	return nil
}
