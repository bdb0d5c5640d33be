package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/cliflag"
)

const runsSynopsis = "runs get|events|cancel [--socket PATH] ID"

// cmdRuns is `pmjail runs get|events|cancel ID`: an async run's state
// (the run object), its output passed through as `pmjail run` passes it,
// with run's exit code, or its cancellation.
func cmdRuns(args []string) int {
	fs := flag.NewFlagSet("runs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sock := fs.String("socket", client.DefaultSocketPath, "the daemon's Unix socket, `PATH`")
	if len(args) == 0 {
		return commandFailure(fs, runsSynopsis, errors.New("say get, events or cancel"))
	}
	verb, rest := args[0], args[1:]
	if strings.HasPrefix(verb, "-") {
		// A flag first (`runs --help`, `runs --socket S get ID`): the
		// verb is among the arguments.
		verb, rest = "", args
	}
	if err := cliflag.Parse(fs, rest); err != nil {
		if cliflag.Help(fs, runsSynopsis, err) {
			return 0
		}
		return commandFailure(fs, runsSynopsis, err)
	}
	pos := fs.Args()
	if verb == "" && len(pos) > 0 {
		verb, pos = pos[0], pos[1:]
	}
	if verb == "" {
		return commandFailure(fs, runsSynopsis, errors.New("say get, events or cancel"))
	}
	if len(pos) != 1 {
		return commandFailure(fs, runsSynopsis, errors.New("name one run id"))
	}
	if *sock == "" {
		// Else "dial unix: missing address", naming no flag.
		return commandFailure(fs, runsSynopsis, fmt.Errorf("--socket: empty path (leave the flag out for %s)", client.DefaultSocketPath))
	}
	id := pos[0]
	// Interrupting stops the waiting, not the run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := client.New(*sock)
	defer c.Close()
	var (
		run *api.Run
		err error
	)
	switch verb {
	case "get":
		run, err = c.GetRun(ctx, id)
	case "cancel":
		run, err = c.CancelRun(ctx, id)
	case "events":
		var res *api.Result
		res, err = c.RunEvents(ctx, id, func(ev api.Event) {
			switch ev.Type {
			case api.EventStdout:
				_, _ = stdout.Write([]byte(ev.Data))
			case api.EventStderr:
				_, _ = os.Stderr.WriteString(ev.Data)
			}
		})
		if err == nil {
			return report(res, false)
		}
	default:
		return commandFailure(fs, runsSynopsis, fmt.Errorf("%q: say get, events or cancel", verb))
	}
	if err != nil {
		return fail("runs %s: %v", verb, err)
	}
	printJSON(run)
	return 0
}

// printJSON prints v as indented JSON on stdout.
func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
