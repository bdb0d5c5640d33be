package queue

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A submitter's text in a job's log lines is clipped: the subject's
// tenant token and the id header went whole into every line the worker
// logged of the job (a refused job's field and message too), so a
// message's tens of kilobytes of id went into each of its lines in the
// operator's log.
func TestWorkerLogsClipTheSubmittersText(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	logs := &logBuf{}
	w, err := NewWorker(context.Background(), &cfg, admitAll{&echo{}}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(func() { w.Stop(time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := strings.Repeat("i", 48<<10) // within the server's header cap
	msg := &nats.Msg{Subject: cfg.Subject + ".alice", Header: nats.Header{HeaderID: []string{id}}, Data: []byte(`{"runtime":"deno"}`)}
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, c, cfg)
	lines := strings.Split(logs.String(), "\n")
	var seen bool
	for _, l := range lines {
		if strings.Contains(l, "iiii") {
			seen = true
		}
		if len(l) > 4<<10 {
			t.Errorf("a log line of %d bytes: %.200s…", len(l), l)
		}
	}
	if !seen {
		t.Errorf("no log line names the job's id (%d lines): the test saw nothing of it", len(lines))
	}
}
