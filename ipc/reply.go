package ipc

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/pmjail/pmjail/internal/jsonstr"
)

// replyHead is the start of an ok reply frame's body, up to its id.
const replyHead = `{"type":"` + typeReply + `","id":`

// maxReplyOverhead is what an ok reply frame adds around its value at
// most (the largest id): a value this much under the frame cap fits.
const maxReplyOverhead = len(replyHead + `9007199254740991,"ok":true,"value":}`)

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
func (b *broker) responseValue(ctx context.Context, resp *http.Response) (json.RawMessage, *CallError) {
	limit := b.ceil.MaxResponseBytes
	bodyMax := limit
	if resp.ContentLength >= 0 {
		bodyMax = min(resp.ContentLength, limit)
	}
	shape, err := json.Marshal(sendResult{Status: resp.StatusCode, Headers: responseHeaders(resp.Header)})
	if err != nil || !strings.HasSuffix(string(shape), emptyBody) {
		return nil, callErr(CodeInternal, "encode response")
	}
	prefix := shape[:len(shape)-len(emptyBody)] // up to "body":
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

	body, err := readBody(resp.Body, resp.ContentLength, limit)
	if err != nil {
		return nil, b.netErr(ctx, fmt.Errorf("read response: %w", err))
	}
	if int64(len(body)) > bodyMax {
		return nil, callErr(CodeTooLarge, "the response body is over the %d-byte cap", limit)
	}
	size := int64(len(prefix)) + int64(jsonstr.Len(body)) + 1
	if size > valueMax {
		return nil, callErr(CodeTooLarge, "the reply (%d bytes encoded) would exceed the %d-byte frame cap", size, b.ceil.MaxFrame)
	}
	v := make([]byte, 0, size)
	v = append(v, prefix...)
	v = jsonstr.Append(v, body)
	v = append(v, '}')
	kept = int64(len(v))
	return v, nil
}

// readBody reads up to limit+1 bytes of r, into one allocation of the
// announced length when there is one. Otherwise the buffer doubles (leaving
// less garbage behind than appends, which grow by a quarter) and its new
// room is not written, so not resident, until the body fills it.
func readBody(r io.Reader, announced, limit int64) (string, error) {
	var sb strings.Builder
	if announced > 0 && announced <= limit {
		sb.Grow(int(announced))
	}
	var chunk [16 << 10]byte
	r = io.LimitReader(r, limit+1)
	for {
		n, err := r.Read(chunk[:])
		if n > sb.Cap()-sb.Len() {
			sb.Grow(n)
		}
		sb.Write(chunk[:n])
		if errors.Is(err, io.EOF) {
			return sb.String(), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// replyValue answers call id with a value the host encoded itself (compact
// JSON, held in the run's reply budget), written around the value rather
// than copied into a frame, and then gives the value's bytes back to the
// budget.
func (s *session) replyValue(id uint64, method string, value json.RawMessage) {
	defer s.broker.budget.Release(int64(len(value)))
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
