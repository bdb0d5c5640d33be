//go:build nodaemon

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/sibling"
)

// submitRole is queue.SubmitRole, spelled here so that this pmjail links
// no NATS package.
const submitRole = "queue-submit"

// natsRun has pmjail-serve of this build submit and wait (its role
// queue-submit): the job on its stdin, the result on its stdout.
func natsRun(ctx context.Context, o *natsOptions, job *api.Job) (*api.Result, error) {
	path, err := sibling.Find(serveBinaryName, serveBuildID)
	if err != nil {
		return nil, fmt.Errorf("--nats: the NATS client is %s, installed beside pmjail from the same build: %w", serveBinaryName, err)
	}
	body, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	args := []string{submitRole, "--urls", o.urls, "--creds", o.creds, "--nkey", o.nkey, "--user", o.user,
		"--password-file", o.passwordFile, "--stream", o.stream, "--subject", o.subject, "--bucket", o.bucket,
		"--claims", o.claims, "--inbox", o.inbox, "--tenant", o.tenant, "--id", o.id}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = bytes.NewReader(body)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if _, ok := errors.AsType[*exec.ExitError](err); ok {
			// Its reason, one line "pmjail: submit: REASON", is this
			// command's error: said once, as a failure of pmjail's own.
			if msg := strings.TrimSpace(errb.String()); msg != "" {
				return nil, errors.New(strings.TrimPrefix(msg, "pmjail: submit: "))
			}
			return nil, fmt.Errorf("%s %s: %w", serveBinaryName, submitRole, err)
		}
		return nil, err
	}
	var res api.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("%s %s: %w", serveBinaryName, submitRole, err)
	}
	return &res, nil
}
