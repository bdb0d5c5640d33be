package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/signal"
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
	nf := natsFlags(f.fs)
	req, err := f.programRequest(args)
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
		return submitNATS(ctx, nf, wire, f.jsonOut)
	}
	c := client.New(*sock)
	defer c.Close()
	var res *jail.Result
	if f.jsonOut {
		res, err = c.Run(ctx, wire)
	} else {
		res, err = c.Stream(ctx, wire, func(ev api.Event) {
			switch ev.Type {
			case api.EventStdout:
				_, _ = stdout.Write([]byte(ev.Data))
			case api.EventStderr:
				_, _ = os.Stderr.WriteString(ev.Data)
			}
		})
	}
	if err != nil {
		var apiErr *client.Error
		if errors.As(err, &apiErr) {
			return fail("submit: %s", f.flagged(apiErr.Message, apiErr.Field))
		}
		return fail("submit: %v", err)
	}
	return report(res, f.jsonOut)
}
