package ipc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// ErrNotReady: a runtime did not say it was ready (AwaitReady).
var ErrNotReady = errors.New("the runtime did not say it was ready")

// readyMax bounds the ready frame AwaitReady reads: it is a few bytes, and
// a runtime that sends more is not one to keep.
const readyMax = 256

// AwaitReady waits up to timeout, or until ctx ends, for the guest's
// ready frame, its word that the runtime has started and waits for the
// start frame, and reads nothing after it: the session that follows
// (ReadySeen) finds the channel at the guest's next frame. Anything else,
// a timeout or an end of the channel is ErrNotReady, with why.
func AwaitReady(ctx context.Context, conn net.Conn, timeout time.Duration) error {
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("%w: set a deadline: %w", ErrNotReady, err)
	}
	// ctx's end cuts the read short through the same deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	body, err := ReadFrame(conn, readyMax)
	if !stop() {
		return fmt.Errorf("%w: %w", ErrNotReady, context.Cause(ctx))
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w within %s", ErrNotReady, timeout)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: it closed the channel", ErrNotReady)
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	case !isReady(body):
		return fmt.Errorf("%w: its first frame was %.80q: %w", ErrNotReady, body, ErrProtocol)
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("%w: clear the deadline: %w", ErrNotReady, err)
	}
	return nil
}

// isReady reports whether body is a ready frame.
func isReady(body []byte) bool {
	var f guestFrame
	return json.Unmarshal(body, &f) == nil && f.Type == typeReady
}
