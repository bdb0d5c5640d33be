//go:build !nodaemon

package main

import (
	"context"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/queue"
)

// natsRun submits in this process: a pmjail that carries the daemon
// carries its NATS client too.
func natsRun(ctx context.Context, o *natsOptions, job *api.Job) (*api.Result, error) {
	return o.submitOptions().SubmitAndWait(ctx, job)
}

func (o *natsOptions) submitOptions() queue.SubmitOptions {
	return queue.SubmitOptions{
		Config: queue.Config{URLs: strings.Split(o.urls, ","), Credentials: o.creds, Nkey: o.nkey, User: o.user, PasswordFile: o.passwordFile,
			Stream: o.stream, Subject: o.subject, Bucket: o.bucket, Claims: o.claims, InboxPrefix: o.inbox},
		Tenant: o.tenant, ID: o.id,
	}
}
