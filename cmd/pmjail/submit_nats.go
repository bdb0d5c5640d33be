package main

import (
	"context"
	"flag"
	"os"

	"github.com/pmjail/pmjail/api"
)

// natsOptions are submit's flags for a NATS JetStream queue of workers.
// This file imports no NATS package: the client is pmjail-serve's (see
// submit_nats_exec.go), or linked in when pmjail carries the daemon.
type natsOptions struct {
	urls, creds, nkey, user, passwordFile  string
	stream, subject, bucket, claims, inbox string
	tenant, id                             string
}

func natsFlags(fs *flag.FlagSet) *natsOptions {
	o := &natsOptions{}
	fs.StringVar(&o.urls, "nats", "", "submit to the workers of a NATS JetStream queue at `URLS` (comma-separated) instead of a daemon's socket")
	fs.StringVar(&o.creds, "nats-creds", "", "NATS credentials `FILE` (.creds)")
	fs.StringVar(&o.nkey, "nats-nkey", "", "NATS nkey seed `FILE`")
	fs.StringVar(&o.user, "nats-user", "", "NATS `USER` (with --nats-password-file)")
	fs.StringVar(&o.passwordFile, "nats-password-file", "", "`FILE` holding the NATS user's password")
	fs.StringVar(&o.stream, "nats-stream", "", "the jobs' stream, `NAME` (default PMJAIL_JOBS)")
	fs.StringVar(&o.subject, "nats-subject", "", "the jobs' subject prefix, `SUBJECT` (default pmjail.jobs)")
	fs.StringVar(&o.bucket, "nats-bucket", "", "the results' bucket, `NAME` (default pmjail_results)")
	fs.StringVar(&o.claims, "nats-claims", "", "the bucket a job id is claimed in before its job is sent, `NAME` (default pmjail_claims)")
	fs.StringVar(&o.inbox, "nats-inbox", "", "the connection's reply subject prefix, `PREFIX` (default _INBOX)")
	fs.StringVar(&o.tenant, "tenant", "others", "the `TENANT` whose subject the job goes to (NATS permissions decide who may)")
	fs.StringVar(&o.id, "id", "", "the job's `ID` (default a fresh one): a job id whose result exists is not run again, and refuses another job")
	return o
}

// submitNATS publishes the job to the stream and waits for its result in
// the bucket; interrupting stops the wait, not the job.
func submitNATS(ctx context.Context, o *natsOptions, job *api.Job, jsonOut bool) int {
	res, err := natsRun(ctx, o, job)
	if err != nil {
		return fail("submit: %v", err)
	}
	if !jsonOut {
		_, _ = stdout.Write([]byte(res.Stdout))
		_, _ = os.Stderr.WriteString(res.Stderr)
	}
	return report(res, jsonOut)
}
