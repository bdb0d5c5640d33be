// Package clienttest holds what the tests that drive a daemon through
// package client share (the server's and the integration suite's).
package clienttest

import (
	"context"
	"sync"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
)

// Started follows the async run id's events and closes the returned
// channel at its first stdout event: a run that prints first thing has
// then started. The stream is followed in a goroutine of its own and ends
// with the run, the daemon or ctx; only its first line matters.
func Started(ctx context.Context, c *client.Client, id string) <-chan struct{} {
	started := make(chan struct{})
	go func() {
		var once sync.Once
		_, _ = c.RunEvents(ctx, id, func(ev api.Event) {
			if ev.Type == api.EventStdout {
				once.Do(func() { close(started) })
			}
		})
	}()
	return started
}
