package queue

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// lineLog is a slog destination tests read back, safe for the worker's
// goroutines.
type lineLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lineLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// A submitter's text in a job's log lines is clipped: the subject's
// tenant token and the id header went whole into every line the worker
// logged of the job (a refused job's field and message too), so a
// message's tens of kilobytes of id went into each of its lines in the
// operator's log.
func TestWorkerLogsClipTheSubmittersText(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	logs := &lineLog{}
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
	lines := logs.lines()
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
