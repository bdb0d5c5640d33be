package server

import (
	"context"
	"errors"
)

// The causes a run is cancelled for, which its result's message names
// (status cancelled, "run cancelled: the client went away").
var (
	errClientGone = errors.New("the client went away")
	errShutdown   = errors.New("the daemon shut down at the end of its grace period")
)

// runContext is a request's context with the reason it ends as its cause:
// net/http ends a request's context when its connection closes, with no
// cause but context.Canceled; a shutdown ends it with errShutdown, which
// it keeps.
func runContext(req context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(req))
	context.AfterFunc(req, func() {
		cause := context.Cause(req)
		if cause == context.Canceled {
			cause = errClientGone
		}
		cancel(cause)
	})
	return ctx
}
