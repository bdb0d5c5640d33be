package queue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// A worker that reaches no server names the config's field at fault, as
// docs/queue.md says; `pmjail submit --nats` names its own flags, not the
// worker config's fields, which its user never wrote.
func TestQueueErrorsNameTheFieldOrFlag(t *testing.T) {
	ctx := context.Background()
	cfg := Config{URLs: []string{"nats://127.0.0.1:1"}}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWorker(ctx, &cfg, nil, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.HasPrefix(err.Error(), "queue.nats.urls: connect to NATS nats://127.0.0.1:1: ") {
		t.Errorf("worker, no server: %v, want queue.nats.urls named", err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URLs: []string{"nats://127.0.0.1:1"}, User: "u", PasswordFile: "/nonexistent-pmjail-pw"}, "--nats-password-file: stat /nonexistent-pmjail-pw: "},
		{Config{URLs: []string{"ftp://127.0.0.1:1"}}, `--nats: "ftp://127.0.0.1:1": `},
		{Config{URLs: []string{"nats://127.0.0.1:1"}, User: "u", Nkey: "/x"}, "--nats-creds, --nats-nkey, --nats-user: set at most one way to authenticate"},
		{Config{URLs: []string{"nats://127.0.0.1:1"}, Stream: "a b"}, `--nats-stream: "a b" (want`},
		{Config{URLs: []string{"nats://127.0.0.1:1"}}, "connect to NATS nats://127.0.0.1:1: "},
	} {
		_, err := SubmitOptions{Config: c.cfg, Tenant: "t"}.SubmitAndWait(ctx, &api.Job{Runtime: "deno", Source: "1"})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("submit %+v: %v, want it to start %q", c.cfg, err, c.want)
		}
	}
}

// A bucket missing is the submit's error, as the client asks for no
// stream's info at Dial; `pmjail submit --nats` names its flag.
func TestSubmitNamesTheMissingBucketsFlag(t *testing.T) {
	url := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{URLs: []string{url}, Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URLs: []string{url}, Claims: "nope"}, "--nats-claims: nope: no such bucket"},
		{Config{URLs: []string{url}, Bucket: "nope"}, "--nats-bucket: nope: no such bucket"},
	} {
		_, err := SubmitOptions{Config: c.cfg, Tenant: "t"}.SubmitAndWait(ctx, &api.Job{Runtime: "deno", Source: "1"})
		if !errors.Is(err, ErrNoBucket) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("submit %+v: %v, want it to start %q", c.cfg, err, c.want)
		}
	}
}
