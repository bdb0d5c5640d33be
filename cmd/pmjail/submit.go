package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/jail"
)

// cmdSubmit sends a job to a daemon: `pmjail submit --socket PATH [run
// flags] FILE`. Its output and exit code are those of `pmjail run`.
func cmdSubmit(args []string) int {
	f := newRunFlags("submit", false)
	sock := f.fs.String("socket", client.DefaultSocketPath, "the daemon's Unix socket, `PATH`")
	async := f.fs.Bool("async", false, "submit as an async run: print its id and status, and do not wait (see pmjail runs)")
	key := f.fs.String("idempotency-key", "", "with --async, the submission's `KEY`: the same key and job again name the same run")
	nf := natsFlags(f.fs)
	req, err := f.programRequest(args)
	if err == nil {
		err = checkSubmitFlags(f.fs, nf)
	}
	if err != nil {
		return commandFailure(f.fs, submitSynopsis, err)
	}
	// The daemon checks the input strictly; here only what the wire
	// needs, as run's refusal words it.
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return commandFailure(f.fs, submitSynopsis, errors.New("--input: not valid JSON"))
	}
	wire, err := req.API()
	if err != nil {
		return fail("submit: %v", err)
	}

	// Interrupting submit closes the connection, which cancels the run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if nf.urls != "" {
		if *async || *key != "" {
			return commandFailure(f.fs, submitSynopsis, errors.New("--async, --idempotency-key: not with --nats (a queue job is async already; --id names it)"))
		}
		return submitNATS(ctx, nf, wire, f.jsonOut)
	}
	c := client.New(*sock)
	defer c.Close()
	if *async {
		run, err := c.SubmitAsync(ctx, wire, *key)
		if err != nil {
			return submitFailure(f, err)
		}
		printJSON(run)
		return 0
	}
	if *key != "" {
		return commandFailure(f.fs, submitSynopsis, errors.New("--idempotency-key: only with --async"))
	}
	var res *jail.Result
	if f.jsonOut {
		res, err = c.Run(ctx, wire)
	} else {
		res, err = c.Stream(ctx, wire, func(ev api.Event) {
			// Bytes pass through as the guest wrote them (the event
			// arrives decoded, whatever its encoding on the wire).
			switch ev.Type {
			case api.EventStdout:
				_, _ = stdout.Write([]byte(ev.Data))
			case api.EventStderr:
				_, _ = os.Stderr.WriteString(ev.Data)
			}
		})
	}
	if err != nil {
		return submitFailure(f, err)
	}
	return report(res, f.jsonOut)
}

// submitFailure reports a refused or failed submission.
func submitFailure(f *runFlags, err error) int {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return fail("submit: %s", f.flagged(apiErr.Message, apiErr.Field))
	}
	return fail("submit: %v", err)
}

// checkSubmitFlags refuses what submit would otherwise ignore, or read as
// its default: an empty --nats or --socket ("dial unix: missing address"
// was all an empty --socket said), a NATS flag without --nats (--tenant
// and --id went nowhere, and the job ran on the socket), and --socket
// with --nats.
func checkSubmitFlags(fs *flag.FlagSet, nf *natsOptions) error {
	var natsOnly []string
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil:
		case f.Name == "nats" && strings.TrimSpace(nf.urls) == "":
			err = errors.New("--nats: empty (name the NATS servers, or leave the flag out to submit to the socket)")
		case f.Name == "socket" && f.Value.String() == "":
			err = fmt.Errorf("--socket: empty path (leave the flag out for %s)", client.DefaultSocketPath)
		case f.Name == "socket" && nf.urls != "":
			err = errors.New("--socket: not with --nats (the job goes to the queue)")
		case f.Name == "tenant" || f.Name == "id" || strings.HasPrefix(f.Name, "nats-"):
			natsOnly = append(natsOnly, "--"+f.Name)
		}
	})
	if err == nil && nf.urls == "" && len(natsOnly) > 0 {
		err = fmt.Errorf("%s: only with --nats", strings.Join(natsOnly, ", "))
	}
	return err
}
