package queue

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pmjail/pmjail/api"
)

// maxJobBytes caps the job the role reads: more than any NATS server
// takes in one message.
const maxJobBytes = 64 << 20

// SubmitRole is the role of pmjail-serve that `pmjail submit --nats`
// execs, so that the NATS client stays out of the CLI, whose start-up
// every `pmjail run` pays: argv[1] names it.
const SubmitRole = "queue-submit"

// SubmitMain is that role: the connection's settings in args (the
// flags pmjail's submit_nats_exec.go writes), the job object on stdin, its result on stdout as JSON; it
// returns the exit code (0 once a result is had, 125 otherwise, the
// reason on stderr).
func SubmitMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	failed := func(err error) int {
		fmt.Fprintf(stderr, "pmjail: submit: %v\n", err)
		return 125
	}
	fs := flag.NewFlagSet(SubmitRole, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o SubmitOptions
	var urls string
	fs.StringVar(&urls, "urls", "", "")
	fs.StringVar(&o.Config.Credentials, "creds", "", "")
	fs.StringVar(&o.Config.Nkey, "nkey", "", "")
	fs.StringVar(&o.Config.User, "user", "", "")
	fs.StringVar(&o.Config.PasswordFile, "password-file", "", "")
	fs.StringVar(&o.Config.Stream, "stream", "", "")
	fs.StringVar(&o.Config.Subject, "subject", "", "")
	fs.StringVar(&o.Config.Bucket, "bucket", "", "")
	fs.StringVar(&o.Config.Claims, "claims", "", "")
	fs.StringVar(&o.Config.InboxPrefix, "inbox", "", "")
	fs.StringVar(&o.Tenant, "tenant", "", "")
	fs.StringVar(&o.ID, "id", "", "")
	if err := fs.Parse(args); err != nil {
		return failed(err)
	}
	o.Config.URLs = strings.Split(urls, ",")
	// The job was built and checked by pmjail; the workers check it again.
	var wire api.Job
	dec := json.NewDecoder(io.LimitReader(stdin, maxJobBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wire); err != nil {
		return failed(fmt.Errorf("read job: %w", err))
	}
	// Interrupting stops the wait, not the job: it is in the stream.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := o.SubmitAndWait(ctx, &wire)
	if err != nil {
		return failed(err)
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return failed(err)
	}
	return 0
}

// SubmitOptions are what a one-off submit needs: where, as whom, and
// under which tenant and id (a fresh id when empty).
type SubmitOptions struct {
	Config Config
	Tenant string
	ID     string
}

// SubmitAndWait submits the job and waits for its result. A refusal of
// the connection's settings names `pmjail submit`'s flag, which its user
// wrote, not the config field (queue.nats.FIELD) it sets.
func (o SubmitOptions) SubmitAndWait(ctx context.Context, j *api.Job) (*api.Result, error) {
	c, err := Dial(ctx, o.Config)
	if err != nil {
		return nil, asSubmitFlags(err)
	}
	defer c.Close()
	id := o.ID
	if id == "" {
		id = NewID()
	}
	res, err := c.SubmitWait(ctx, o.Tenant, id, j)
	if errors.Is(err, ErrIDConflict) && o.ID != "" {
		return nil, fmt.Errorf("--id: %w", err)
	}
	if errors.Is(err, ErrNoBucket) {
		// Found at the submit, not at Dial (tenantKV).
		return nil, asSubmitFlags(err)
	}
	return res, err
}

// submitFlags are pmjail submit's flags for the config's fields.
var submitFlags = map[string]string{
	"urls": "--nats", "credentials": "--nats-creds", "nkey": "--nats-nkey", "user": "--nats-user",
	"password": "--nats-password-file", "password_file": "--nats-password-file", "inbox_prefix": "--nats-inbox",
	"stream": "--nats-stream", "subject": "--nats-subject", "bucket": "--nats-bucket",
	"claims": "--nats-claims",
}

// asSubmitFlags rewrites an error that names the config's fields
// ("queue.nats.urls[0]: ...", "queue.nats.credentials, nkey, user: ...")
// to name the flags; another error is left as it is.
func asSubmitFlags(err error) error {
	rest, ok := strings.CutPrefix(err.Error(), "queue.nats.")
	if !ok {
		return err
	}
	head, tail, ok := strings.Cut(rest, ":")
	if !ok {
		return err
	}
	var flags []string
	for _, field := range strings.Split(head, ", ") {
		field, _, _ = strings.Cut(field, "[")
		flag, ok := submitFlags[field]
		if !ok {
			return err
		}
		flags = append(flags, flag)
	}
	return &flagError{msg: strings.Join(flags, ", ") + ":" + tail, err: err}
}

// flagError is an error reworded to name a flag; it wraps the original.
type flagError struct {
	msg string
	err error
}

func (e *flagError) Error() string { return e.msg }
func (e *flagError) Unwrap() error { return e.err }
