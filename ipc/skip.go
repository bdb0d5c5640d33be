package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxCallHead is how much of an oversized frame is read to learn which
// call it is. The bootstrap writes a call's type, id and method before its
// params, so they come first whatever the params' size.
const maxCallHead = 4 << 10

// skipOversized handles a frame whose header announced more than the cap.
// If the start of its body names a call, the rest is read past without
// being kept and that call is answered too_large: one oversized call (a
// huge log message) costs the guest that call, not the run. Otherwise the
// channel is no longer in step and the result is an error for end: a frame
// that is not a call, a head that does not say which call (type, id and
// method), or a body that does not arrive within the frame timeout.
func (s *session) skipOversized(big *FrameTooLargeError) error {
	n := int(big.Length)
	notCall := fmt.Errorf("%w: %w: its start does not name a call (type, id, method) that could be answered", ErrProtocol, big)
	// Bytes that do not open an object are no call: garbage needs no wait
	// for the rest of the head.
	if first, err := s.br.Peek(1); err == nil && !bytes.ContainsAny(first, "{ \t\r\n") {
		return notCall
	}
	head, err := s.br.Peek(min(n, maxCallHead))
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: reading its start: %w", big, err)
	}
	id, method, ok := parseCallHead(head)
	if !ok {
		return notCall
	}
	if _, err := s.br.Discard(n); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: skipping it: %w", big, err)
	}
	s.log.Debug("ipc call over the frame cap skipped", "method", method, "bytes", n)
	if callID, admitted := s.admitCall(id, method); admitted {
		s.reply(callID, method, nil, callErr(CodeTooLarge, "the call's frame (%d bytes) is over the %d-byte cap", n, big.Max))
	}
	return nil
}

// parseCallHead reads the leading members of a frame body's top-level
// object, as far as they are strings and numbers and the head holds them,
// and reports the call's id and method when the frame is a call that names
// both.
func parseCallHead(head []byte) (id json.RawMessage, method string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, "", false
	}
	var typ string
	for typ == "" || id == nil || method == "" {
		k, err := dec.Token()
		key, isKey := k.(string)
		if err != nil || !isKey {
			break
		}
		v, err := dec.Token()
		if err != nil {
			break
		}
		switch v := v.(type) {
		case json.Delim:
			// An object or array: what follows it is out of reach.
			return id, method, typ == typeCall && id != nil && method != ""
		case string:
			switch key {
			case "type":
				typ = v
			case "method":
				method = v
			}
		case json.Number:
			if key == "id" {
				id = json.RawMessage(v)
			}
		}
	}
	return id, method, typ == typeCall && id != nil && method != ""
}
