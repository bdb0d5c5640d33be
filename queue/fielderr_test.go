package queue

import (
	"context"
	"log/slog"
	"strings"
	"testing"

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
