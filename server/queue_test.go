package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQueueConfigExampleParses: deploy/queue's worker config stays valid
// (its password file a test file), and its queue section is checked with
// the daemon's.
func TestQueueConfigExampleParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "queue", "worker.config.json"))
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer("/etc/pmjail/nats-worker.password", pw, `"pmjail"`, `"root"`).Replace(string(data))
	c, err := ParseConfig(strings.NewReader(cfg))
	if err != nil {
		t.Fatalf("deploy/queue/worker.config.json: %v", err)
	}
	if q := c.Queue.NATS; q == nil || len(q.URLs) != 3 || time.Duration(q.AckWait) != 30*time.Second || q.Concurrency != 4 {
		t.Errorf("queue section: %+v", q)
	}
}

// TestQueueConfigRefusals: a bad queue field stops the config, named.
func TestQueueConfigRefusals(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"version": 1, "queue": {"nats": {}}}`:                                                               "queue.nats.urls",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "ack_wait": "10ms"}}}`:                     "queue.nats.ack_wait",
		`{"version": 1, "max_concurrency": 2, "queue": {"nats": {"urls": ["nats://h:1"], "concurrency": 3}}}`: "queue.nats.concurrency",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "password_file": "/nonexistent/pw"}}}`:     "queue.nats.",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "stream": "a.b"}}}`:                        "queue.nats.stream",
		`{"version": 1, "queue": {"nats": {"urls": ["nats://h:1"], "acks": 1}}}`:                              "acks",
	} {
		_, err := ParseConfig(strings.NewReader(cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", cfg, err, want)
		}
	}
}
