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

// overBudgetError is readFrame's for a frame that arrives once the run's
// frames have used MaxGuestBytes; nothing of it has been read.
type overBudgetError struct{ length int }

func (e *overBudgetError) Error() string {
	return fmt.Sprintf("a frame of %d bytes past the run's budget", e.length)
}

// maxFramesPastBudget is how many calls and notes a run may send past
// MaxGuestBytes, each refused, before it is a protocol error. Reading a
// frame by its head costs the host a microsecond or more and the guest,
// writing a buffer of a thousand frames at once, next to nothing: a guest
// writing small notes without end held a daemon core for its wall time
// (10 s of the supervisor's CPU to the guest's 0.2 s).
const maxFramesPastBudget = 16 << 10

// skipOverBudget handles a frame of n bytes that arrives past the run's
// MaxGuestBytes. Decoding a frame costs the daemon many times what writing
// it costs the guest, outside the run's CPU time; reading past one costs
// both sides alike. So its head alone is read: a call is read past and
// answered rate_limited, a note read past and dropped (counted as the call
// and the log it would have been), and the run's last frame (done or
// error) is read whole and returned for handle. A frame whose head does
// not name its type first cannot be told apart without decoding it: that
// is a protocol error.
func (s *session) skipOverBudget(n int) ([]byte, error) {
	head, err := s.br.Peek(headerLen + min(n, maxCallHead))
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read frame past the budget: %w", err)
	}
	typ, id, method := frameHead(head[headerLen:])
	switch {
	case typ == "":
		return nil, fmt.Errorf("%w: past the run's %d-byte budget for frames, a frame must name its type first (before any object or array)", ErrProtocol, s.ceil.MaxGuestBytes)
	case typ == typeDone || typ == typeError || typ == typeExit:
		return ReadFrame(s.br, s.ceil.MaxFrame)
	case typ != typeCall && typ != typeNote:
		return nil, fmt.Errorf("%w: unknown frame type %.80q", ErrProtocol, typ)
	}
	if typ == typeCall && (id == nil || method == "") {
		return nil, fmt.Errorf("%w: past the run's %d-byte budget for frames, a call must name its id and method before its params", ErrProtocol, s.ceil.MaxGuestBytes)
	}
	if s.past++; s.past > maxFramesPastBudget {
		return nil, fmt.Errorf("%w: %d calls and notes past the run's %d-byte budget for frames, each refused", ErrProtocol, maxFramesPastBudget, s.ceil.MaxGuestBytes)
	}
	if _, err := s.br.Discard(headerLen + n); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read frame past the budget: skipping it: %w", err)
	}
	if typ == typeNote {
		s.mu.Lock()
		s.out.Calls++
		s.out.LogsDropped++
		s.mu.Unlock()
		return nil, nil
	}
	if callID, admitted := s.admitCall(id, method); admitted {
		if len(method) > 4 && method[:4] == "log." {
			s.mu.Lock()
			s.out.LogsDropped++
			s.mu.Unlock()
		}
		s.reply(callID, method, nil, callErr(CodeRateLimited, "the run's frames have used the %d bytes a run may send", s.ceil.MaxGuestBytes))
	}
	return nil, nil
}

// parseCallHead reads the leading members of a frame body's top-level
// object, as far as they are strings and numbers and the head holds them,
// and reports the call's id and method when the frame is a call that names
// both.
func parseCallHead(head []byte) (id json.RawMessage, method string, ok bool) {
	typ, id, method := frameHead(head)
	return id, method, typ == typeCall && id != nil && method != ""
}

// maxHeadMembers is how many leading members frameHead reads: a call's
// type, id and method, and one more (another frame's type alone). Decoded token by token, a head of a
// thousand one-byte members cost the daemon ~400 µs, forty times what
// the same bytes in one string cost, for 4 KiB the guest wrote in a
// microsecond; the guest's own frames name all three first.
const maxHeadMembers = 4

// frameHead reads the leading members of a frame body's top-level object,
// at most maxHeadMembers, as far as they are strings and numbers and the
// head holds them, and returns its type, id and method as far as they are
// among them.
func frameHead(head []byte) (typ string, id json.RawMessage, method string) {
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", nil, ""
	}
	for range maxHeadMembers {
		// Only a call's id and method are wanted.
		if typ != "" && (typ != typeCall || id != nil && method != "") {
			break
		}
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
			return typ, id, method
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
	return typ, id, method
}
