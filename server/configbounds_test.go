package server

import (
	"fmt"
	"strings"
	"testing"
)

// TestConfigBoundsRefused: a typo of an order of magnitude or nine in a
// bound was taken at start and at a reload. max_queue of 1e9 let one
// peer queue async runs, each holding its job in the daemon's memory,
// without end; socket.max_connections above the daemon's RLIMIT_NOFILE
// is a cap that never applies (the fds run out first, the runs' with
// them); runs.max_bytes below twice the output ceiling cannot keep a run
// that writes its ceiling (its output is stored twice), which then ends
// with its result gone. Each is refused, naming the field and the bound;
// at the bound it is taken.
func TestConfigBoundsRefused(t *testing.T) {
	limit := nofile()
	for _, tc := range []struct{ cfg, want string }{
		{`{"version": 1, "max_queue": 1000000000}`, fmt.Sprintf("max_queue: 1000000000 is over the %d", MaxQueueLimit)},
		{fmt.Sprintf(`{"version": 1, "max_queue": %d}`, MaxQueueLimit+1), "max_queue: "},
		{fmt.Sprintf(`{"version": 1, "socket": {"max_connections": %d}}`, limit+1), fmt.Sprintf("socket.max_connections: %d is over the daemon's RLIMIT_NOFILE of %d", limit+1, limit)},
		{fmt.Sprintf(`{"version": 1, "socket": {"max_connections_per_uid": %d}}`, limit+1), "socket.max_connections_per_uid: "},
		{`{"version": 1, "runs": {"max_bytes": "16M"}}`, "runs.max_bytes: 16777216 is below twice ceiling.limits.output (16777216)"},
		{`{"version": 1, "ceiling": {"limits": {"output": "1M"}}, "runs": {"max_bytes": "1M"}}`, "runs.max_bytes: "},
	} {
		_, err := ParseConfig(strings.NewReader(tc.cfg))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q...", tc.cfg, err, tc.want)
		}
	}
	for _, ok := range []string{
		fmt.Sprintf(`{"version": 1, "max_queue": %d}`, MaxQueueLimit),
		fmt.Sprintf(`{"version": 1, "socket": {"max_connections": %d}}`, limit),
		`{"version": 1, "ceiling": {"limits": {"output": "1M"}}, "runs": {"max_bytes": "2M"}}`,
		// The default max_queue, twice the slots, stays within the bound.
		`{"version": 1, "max_concurrency": 16000, "prestart": -1, "warm": {"deno": 0}}`,
	} {
		if _, err := ParseConfig(strings.NewReader(ok)); err != nil {
			t.Errorf("%s: %v, want it taken", ok, err)
		}
	}
	// A reload refuses them as a start does, and keeps the config.
	ts := startServer(t, `{"version": 1}`)
	before := ts.Config()
	err := ts.ReloadFrom(func() (*Config, error) {
		return ParseConfig(strings.NewReader(`{"version": 1, "max_queue": 1000000000}`))
	})
	if err == nil || !strings.Contains(err.Error(), "max_queue") || ts.Config() != before {
		t.Errorf("a reload to max_queue 1e9: %v, want refused, the config kept", err)
	}
}
