package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/queue"
)

// natsOptions are submit's flags for a NATS JetStream queue of workers.
type natsOptions struct {
	urls, creds, nkey, user, passwordFile string
	stream, subject, bucket, inbox        string
	tenant, id                            string
}

func natsFlags(fs *flag.FlagSet) *natsOptions {
	o := &natsOptions{}
	fs.StringVar(&o.urls, "nats", "", "submit to the workers of a NATS JetStream queue at `URLS` (comma-separated) instead of a daemon's socket")
	fs.StringVar(&o.creds, "nats-creds", "", "NATS credentials `FILE` (.creds)")
	fs.StringVar(&o.nkey, "nats-nkey", "", "NATS nkey seed `FILE`")
	fs.StringVar(&o.user, "nats-user", "", "NATS `USER` (with --nats-password-file)")
	fs.StringVar(&o.passwordFile, "nats-password-file", "", "`FILE` holding the NATS user's password")
	fs.StringVar(&o.stream, "nats-stream", "", "the jobs' stream, `NAME` (default "+queue.DefaultStream+")")
	fs.StringVar(&o.subject, "nats-subject", "", "the jobs' subject prefix, `SUBJECT` (default "+queue.DefaultSubject+")")
	fs.StringVar(&o.bucket, "nats-bucket", "", "the results' bucket, `NAME` (default "+queue.DefaultBucket+")")
	fs.StringVar(&o.inbox, "nats-inbox", "", "the connection's reply subject prefix, `PREFIX` (default _INBOX)")
	fs.StringVar(&o.tenant, "tenant", "others", "the `TENANT` whose subject the job goes to (NATS permissions decide who may)")
	fs.StringVar(&o.id, "id", "", "the job's `ID` (default a fresh one): a job id whose result exists is not run again")
	return o
}

// submitNATS publishes the job to the stream and waits for its result in
// the bucket; interrupting stops the wait, not the job.
func submitNATS(ctx context.Context, o *natsOptions, job *api.Job, jsonOut bool) int {
	cfg := queue.Config{URLs: strings.Split(o.urls, ","), Credentials: o.creds, Nkey: o.nkey,
		User: o.user, PasswordFile: o.passwordFile, Stream: o.stream, Subject: o.subject, Bucket: o.bucket, InboxPrefix: o.inbox}
	c, err := queue.Dial(ctx, cfg)
	if err != nil {
		return fail("submit: %v", err)
	}
	defer c.Close()
	id := o.id
	if id == "" {
		id = queue.NewID()
	}
	if err := c.Submit(ctx, o.tenant, id, job); err != nil {
		return fail("submit: %v", err)
	}
	res, err := c.Wait(ctx, o.tenant, id)
	if err != nil {
		return fail("submit: %v", err)
	}
	if !jsonOut {
		_, _ = stdout.Write([]byte(res.Stdout))
		_, _ = os.Stderr.WriteString(res.Stderr)
	}
	return report(res, jsonOut)
}
