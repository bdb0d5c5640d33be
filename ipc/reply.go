package ipc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/pmjail/pmjail/internal/jsonstr"
	"github.com/pmjail/pmjail/internal/offheap"
)

// replyHead is the start of an ok reply frame's body, up to its id.
const replyHead = `{"type":"` + typeReply + `","id":`

// maxReplyOverhead is what an ok reply frame adds around its value at
// most (the largest id): a value this much under the frame cap fits.
const maxReplyOverhead = len(replyHead + `9007199254740991,"ok":true,"value":}`)

// smallBody is the size under which a response body is read on the heap.
const smallBody = 64 << 10

// emptyBody is how a sendResult with no body ends.
const emptyBody = `""}`

// responseValue reads a response's body and encodes request.send's value
// from it within the run's reply budget. Before reading it reserves the
// most the body and its value may take; once the body is read, the value's
// exact size is known: over the frame cap it is refused before it is
// built (a body of control characters grows sixfold escaped), and
// otherwise it is built in one allocation of that size. The value returned
// still holds its own length of the budget, which the session gives back
// once the reply is written (replyValue).
func (b *broker) responseValue(ctx context.Context, resp *http.Response, shape sendResult) (json.RawMessage, *CallError) {
	limit := b.ceil.MaxResponseBytes
	bodyMax := limit
	if resp.ContentLength >= 0 {
		bodyMax = min(resp.ContentLength, limit)
	}
	// An origin that echoes what it got must not hand the guest a secret.
	shape.Headers = b.scrubber.headers(responseHeaders(resp.Header))
	head, err := json.Marshal(shape)
	if err != nil || !strings.HasSuffix(string(head), emptyBody) {
		return nil, callErr(CodeInternal, "encode response")
	}
	prefix := head[:len(head)-len(emptyBody)] // up to "body":
	valueMax := int64(b.ceil.MaxFrame - maxReplyOverhead)
	reserved := bodyMax + min(valueMax, int64(len(prefix)+len(emptyBody))+6*bodyMax)
	if err := b.budget.Acquire(ctx, reserved); err != nil {
		if errors.Is(err, ErrOverBudget) {
			return nil, callErr(CodeTooLarge, "the response would take more than the run's reply budget")
		}
		return nil, b.netErr(ctx, err)
	}
	var kept int64
	defer func() { b.budget.Release(reserved - kept) }()

	// The body is read off the heap and freed as soon as its value is
	// built (or refused): a run's calls leave no garbage the size of their
	// bodies behind for the collector. A small one is read on the heap: a
	// mapping and its unmapping cost more than the garbage of a few pages.
	var buf offheap.Buffer
	if bodyMax < smallBody {
		buf.B = make([]byte, bodyMax+1)
	} else {
		buf = offheap.Alloc(int(bodyMax) + 1)
	}
	defer buf.Free()
	n, err := readFill(resp.Body, buf.B)
	switch {
	case err == nil:
		return nil, callErr(CodeTooLarge, "the response body is over the %d-byte cap", limit)
	case !errors.Is(err, io.EOF):
		return nil, b.netErr(ctx, fmt.Errorf("read response: %w", err))
	}
	body := b.scrubber.scrubBytes(buf.B[:n])
	asBase64 := shape.BodyEncoding == encodingBase64
	encoded := int64(jsonstr.Len(body))
	if asBase64 {
		encoded = int64(base64.StdEncoding.EncodedLen(len(body))) + 2 // and its quotes
	}
	size := int64(len(prefix)) + encoded + 1
	if size > valueMax {
		return nil, callErr(CodeTooLarge, "the reply (%d bytes encoded) would exceed the %d-byte frame cap", size, b.ceil.MaxFrame)
	}
	v := make([]byte, 0, size)
	v = append(v, prefix...)
	if asBase64 {
		v = append(v, '"')
		v = base64.StdEncoding.AppendEncode(v, body)
		v = append(v, '"')
	} else {
		v = jsonstr.Append(v, body)
	}
	v = append(v, '}')
	kept = int64(len(v))
	return v, nil
}

// readFill reads r into b until b is full (nil error) or r ends (io.EOF,
// or r's own error: a body cut short is not a short body).
func readFill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// replyValue answers call id with a value the host encoded itself (compact
// JSON, held in the run's reply budget), written around the value rather
// than copied into a frame, and then gives the value's bytes back to the
// budget.
func (s *session) replyValue(id uint64, method string, value json.RawMessage) {
	defer s.broker.budget.Release(int64(len(value)))
	s.replyRaw(id, method, value)
}

// replyRaw answers call id with value, JSON the host has checked already,
// written around the value rather than encoded again.
func (s *session) replyRaw(id uint64, method string, value json.RawMessage) {
	head := binary.BigEndian.AppendUint32(nil, 0)
	head = append(head, replyHead...)
	head = strconv.AppendUint(head, id, 10)
	head = append(head, `,"ok":true,"value":`...)
	n := len(head) - headerLen + len(value) + 1
	if n > s.ceil.MaxFrame {
		s.reply(id, method, nil, callErr(CodeTooLarge, "the reply would exceed the %d-byte frame cap", s.ceil.MaxFrame))
		return
	}
	binary.BigEndian.PutUint32(head, uint32(n))
	_ = s.write(head, value, []byte("}")) // a failure has already stopped the session
}
