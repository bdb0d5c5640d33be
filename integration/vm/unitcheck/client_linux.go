package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
)

// roleClient is argv[1] of this binary re-executed as a client of the
// daemon, under the credentials of the peer a check plays.
const roleClient = "client"

// peer is who a client connects as.
type peer struct{ uid, gid uint32 }

func (p peer) String() string { return fmt.Sprintf("uid %d gid %d", p.uid, p.gid) }

// outcome is what the client role reports: an answer, or how it was refused.
type outcome struct {
	Health *api.Health `json:"health,omitempty"`
	Result *api.Result `json:"result,omitempty"`
	Err    string      `json:"error,omitempty"`
	// Errno names a failed connection's error (EACCES), HTTPStatus a
	// refusal by the daemon.
	Errno      string `json:"errno,omitempty"`
	HTTPStatus int    `json:"http_status,omitempty"`
}

// asPeer runs the client role as p: op "health", or "run" with a job's JSON.
func asPeer(p peer, op string, args ...string) (*outcome, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{roleClient, op}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: p.uid, Gid: p.gid, Groups: []uint32{}}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("client %s as %s: %w: %s", op, p, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var o outcome
	if err := json.Unmarshal(stdout.Bytes(), &o); err != nil {
		return nil, fmt.Errorf("client %s as %s: %w: %q", op, p, err, stdout.String())
	}
	return &o, nil
}

// answer is asPeer for a call that must succeed.
func answer(p peer, op string, args ...string) (*outcome, error) {
	o, err := asPeer(p, op, args...)
	if err != nil {
		return nil, err
	}
	if o.Err != "" {
		return nil, fmt.Errorf("client %s as %s: %s", op, p, o.Err)
	}
	return o, nil
}

// runClient is the client role: one call, its outcome as JSON on stdout.
func runClient(args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := client.New(client.DefaultSocketPath)
	defer c.Close()
	var o outcome
	var err error
	switch {
	case len(args) == 1 && args[0] == "health":
		o.Health, err = c.Health(ctx)
	case len(args) == 2 && args[0] == "run":
		var req api.Job
		if err := json.Unmarshal([]byte(args[1]), &req); err != nil {
			fmt.Fprintf(os.Stderr, "job: %v\n", err)
			return 2
		}
		o.Result, err = c.Run(ctx, &req)
	default:
		fmt.Fprintf(os.Stderr, "usage: %s health | run JOB\n", roleClient)
		return 2
	}
	if err != nil {
		o.Err = err.Error()
		if errno, ok := errors.AsType[syscall.Errno](err); ok {
			o.Errno = unix.ErrnoName(errno)
		}
		if refusal, ok := errors.AsType[*client.Error](err); ok {
			o.HTTPStatus = refusal.StatusCode
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(&o); err != nil {
		return 1
	}
	return 0
}
