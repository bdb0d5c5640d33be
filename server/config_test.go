package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/profiles"
)

func TestConfigDefaults(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(`{"version": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxConcurrency != runtime.NumCPU() || c.MaxQueue != 2*runtime.NumCPU() {
		t.Errorf("concurrency %d queue %d, want NumCPU and twice that", c.MaxConcurrency, c.MaxQueue)
	}
	if c.poolSize() != c.MaxConcurrency {
		t.Errorf("prestart %d, want max_concurrency %d", c.poolSize(), c.MaxConcurrency)
	}
	for cfg, want := range map[string]int{`{"version": 1, "prestart": -1}`: 0, `{"version": 1, "prestart": 3}`: 3,
		// The default follows max_concurrency up to the bound an explicit value has.
		`{"version": 1, "max_concurrency": 100}`: MaxPool} {
		c, err := ParseConfig(strings.NewReader(cfg))
		if err != nil {
			t.Errorf("%s: %v", cfg, err)
		} else if c.poolSize() != want {
			t.Errorf("%s: prestart %d, want %d", cfg, c.poolSize(), want)
		}
	}
	if c.Warm["deno"] != c.MaxConcurrency || c.Warm["python"] != 0 || c.WarmMaxAge != profiles.Duration(DefaultWarmMaxAge) {
		t.Errorf("warm %v, max age %v: want deno max_concurrency, no python, %v", c.Warm, c.WarmMaxAge, DefaultWarmMaxAge)
	}
	// Each runtime left out of warm keeps its own default: an operator
	// who adds warm Pythons does not lose the warm Denos.
	for cfg, want := range map[string]map[string]int{
		`{"version": 1, "max_concurrency": 3, "warm": {"python": 1}}`:            {"deno": 3, "python": 1},
		`{"version": 1, "max_concurrency": 3, "warm": {}}`:                       {"deno": 3},
		`{"version": 1, "max_concurrency": 3, "warm": {"deno": 0, "python": 2}}`: {"deno": 0, "python": 2},
		`{"version": 1, "max_concurrency": 99, "warm": {"python": 1}}`:           {"deno": MaxWarm, "python": 1},
	} {
		c, err := ParseConfig(strings.NewReader(cfg))
		if err != nil {
			t.Errorf("%s: %v", cfg, err)
			continue
		}
		for rt, n := range want {
			if got, ok := c.Warm[rt]; !ok || got != n {
				t.Errorf("%s: warm %v, want %s %d", cfg, c.Warm, rt, n)
			}
		}
	}
	if c.Socket.Path != DefaultSocketPath || c.Socket.Mode != "0660" {
		t.Errorf("socket %+v", c.Socket)
	}
	ceil, err := c.Ceiling.JobCeiling()
	if err != nil {
		t.Fatal(err)
	}
	if ceil.Limits != DefaultLimits() || !ceil.Broker.AllowLog || ceil.Broker.AllowRequest {
		t.Errorf("default ceiling: %+v", ceil)
	}
	if len(ceil.Runtimes) != 2 {
		t.Errorf("runtimes %v, want both", ceil.Runtimes)
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{`{"version": 1, "bogus": 1}`, "bogus: unknown field"},
		{`{"version": 1, "ceiling": {"limits": {"memory": "1G", "swap": 1}}}`, "ceiling.limits.swap: unknown field"},
		{`{"version": 1, "queue_timeout": "soon"}`, `queue_timeout: invalid duration "soon"`},
		{`{"version": 1, "ceiling": {"limits": {"memory": "lots"}}}`, `ceiling.limits.memory: invalid size "lots"`},
		{`{}`, "version: missing (want 1"},
		{`{"version": 2}`, "version: 2 (this pmjail reads version 1)"},
		{`{"version": 1, "socket": {"mode": "rw"}}`, "socket.mode"},
		{`{"version": 1, "max_queue": -2}`, "max_queue"},
		{`{"version": 1, "max_concurrency": -1}`, "max_concurrency: -1"},
		// More than the host's job id slots: every run past them failed.
		{`{"version": 1, "max_concurrency": 1000000}`, "max_concurrency: 1000000 is over"},
		{`{"version": 1, "prestart": -2}`, "prestart: -2"},
		{`{"version": 1, "prestart": 65}`, "prestart: 65"},
		{`{"version": 1, "warm": {"ruby": 1}}`, "warm.ruby: not a runtime"},
		{`{"version": 1, "warm": {"deno": -1}}`, "warm.deno: -1"},
		{`{"version": 1, "warm": {"python": 65}}`, "warm.python: 65"},
		{`{"version": 1, "warm_max_age": "-1s"}`, "warm_max_age"},
		{`{"version": 1, "log_level": "loud"}`, "log_level"},
		{`{"version": 1, "ceiling": {"runtimes": ["ruby"]}}`, "ceiling.runtimes[0]"},
		{`{"version": 1, "ceiling": {"mode": "strictest"}}`, "ceiling.mode"},
		{`{"version": 1, "ceiling": {"profiles": ["../x"]}}`, "ceiling.profiles[0]"},
		{`{"version": 1, "ceiling": {"profiles": []}}`, "ceiling.profiles: list at least one"},
		{`{"version": 1, "ceiling": {"capabilities": {"request": {}}}}`, "ceiling.capabilities.request.origins"},
		// The path as the config holds it, not as the broker's ceiling
		// names its fields (it said "ceiling.origins[0]").
		{`{"version": 1, "ceiling": {"capabilities": {"request": {"origins": ["ftp://x"]}}}}`, "ceiling.capabilities.request.origins[0]: "},
		{`{"version": 1, "ceiling": {"capabilities": {"request": {"origins": ["*"], "methods": ["GET", "FETCH"]}}}}`, `ceiling.capabilities.request.methods[1]: "FETCH"`},
		{`{"version": 1, "tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"capabilities": {"request": {"origins": ["https://a.example/x"]}}}}]}`, "tenants[0].ceiling.capabilities.request.origins[0]: "},
		// A layer no host has was taken, and mode required refused every
		// run for want of it.
		{`{"version": 1, "ceiling": {"required": ["landlock", "landlok"]}}`, `ceiling.required[1]: unknown layer "landlok"`},
		{`{"version": 1, "ceiling": {"required": ["landlock"]}, "tenants": [{"name": "a", "match": {"uid": 1}, "ceiling": {"required": ["seccomp", "nope"]}}]}`, `tenants[0].ceiling.required[1]: unknown layer "nope"`},
		{`{"version": 1, "ceiling": {"secrets": {"k": {"value": "a", "value_file": "/x"}}}}`, `ceiling.secrets["k"]`},
		{`{"version": 1, "ceiling": {"secrets": {"k": {"value": "a"}}}}`, `ceiling.secrets["k"].origins: required`},
		{`{"version": 1, "ceiling": {"secrets": {"k": {"value": "a", "origins": []}}}}`, `ceiling.secrets["k"].origins: required`},
		{`{"version": 1, "ceiling": {"secrets": {"k": {"value": "a", "origins": ["https://a.example/path"]}}}}`, `ceiling.secrets["k"].origins[0]`},
		{`{"version": 1, "ceiling": {"capabilities": {"request": {"origins": ["*"], "private_origins": ["127.0.0.1"]}}}}`, "ceiling.capabilities.request.private_origins[0]"},
		{`{"version": 1, "ceiling": {"limits": {"memory": "1M"}}}`, "ceiling.limits.memory"},
		{`{"version": 1, "allow": {"users": ["no-such-user-pmjail"]}}`, `allow.users[0]: unknown user "no-such-user-pmjail"`},
		{`{"version": 1, "allow": {"groups": ["no-such-group-pmjail"]}}`, `allow.groups[0]: unknown group "no-such-group-pmjail"`},
		{`{"version": 1} {}`, "data after"},
		{`{"version": 1, "ceiling": {"packages": ["npm:zod@3.23.8", "npm:zod@^3"]}}`, `ceiling.packages[1]: invalid package reference "npm:zod@^3": version "^3" is not exact`},
	} {
		_, err := ParseConfig(strings.NewReader(tc.cfg))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	// A config that is not one JSON object is malformed; a value at fault
	// in a well-formed one is named by its field alone.
	for cfg, malformed := range map[string]bool{
		`{"version": 1,`: true,
		`{"version": 1, "ceiling": {"limits": {"memory": "lots"}}}`: false,
		`{"version": 1, "max_queue": "4"}`:                          false,
	} {
		if _, err := ParseConfig(strings.NewReader(cfg)); err == nil || strings.Contains(err.Error(), "malformed") != malformed {
			t.Errorf("%s: err %v, want malformed: %v", cfg, err, malformed)
		}
	}
}

func TestConfigCeilingMapping(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("Bearer s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(strings.NewReader(`{
		"version": 1,
		"max_concurrency": 3, "max_queue": -1, "queue_timeout": "5s",
		"allow": {"uids": [1000], "groups": ["root"]},
		"ceiling": {
			"limits": {"memory": "512M", "timeout": 40000},
			"runtimes": ["deno"],
			"mode": "required",
			"capabilities": {"log": false, "request": {"origins": ["https://api.example.com"], "methods": ["GET", "POST"], "max_calls": 5}},
			"secrets": {"api": {"value_file": "` + secret + `", "origins": ["https://api.example.com"]}}
		}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.queueLen() != 0 || time.Duration(c.QueueTimeout) != 5*time.Second {
		t.Errorf("queue %d timeout %v", c.queueLen(), c.QueueTimeout)
	}
	ceil, err := c.Ceiling.JobCeiling()
	if err != nil {
		t.Fatal(err)
	}
	if ceil.Limits.Memory != 512<<20 || time.Duration(ceil.Limits.Timeout) != 40*time.Second ||
		ceil.Limits.Pids != DefaultLimits().Pids {
		t.Errorf("limits %+v", ceil.Limits)
	}
	b := ceil.Broker
	if b.AllowLog || !b.AllowRequest || len(b.Origins) != 1 || b.MaxCalls != 5 || b.Secrets["api"].Value != "Bearer s3cret" {
		t.Errorf("broker ceiling %+v", b)
	}
	// The mapped ceiling is what job.Resolve enforces.
	for _, tc := range []struct {
		req   job.Request
		field string
	}{
		{job.Request{Runtime: "python", Source: "x"}, "runtime"},
		{job.Request{Runtime: "deno", Source: "x", Limits: profiles.Limits{Memory: 1 << 30}}, "limits.memory"},
		{job.Request{Runtime: "deno", Source: "x", Capabilities: mustCaps(t, `{"log": true}`)}, "capabilities.log"},
		{job.Request{Runtime: "deno", Source: "x", Capabilities: mustCaps(t, `{"request": {"urls": ["https://evil.example"]}}`)}, "capabilities.request.urls[0]"},
	} {
		_, err := job.Resolve(&tc.req, ceil, false)
		if err == nil {
			t.Errorf("%+v: resolved, want refused", tc.req)
			continue
		}
		if _, field := job.Refusal(err); field != tc.field {
			t.Errorf("%+v: %v: field %q, want %q", tc.req, err, field, tc.field)
		}
	}
	r, err := job.Resolve(&job.Request{Runtime: "deno", Source: "x", Mode: "auto"}, ceil, false)
	if err != nil || r.Mode != job.ModeRequired {
		t.Errorf("resolve within the ceiling: %v, mode %v (want forced to required)", err, r)
	}
	peers, err := c.Allow.resolve()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    Peer
		want bool
	}{
		{Peer{UID: 1000, GID: 1000}, true},
		{Peer{UID: uint32(os.Geteuid()), GID: 5}, true},
		{Peer{UID: 1001, GID: 0}, true},
		{Peer{UID: 1001, GID: 1001, Groups: []uint32{7, 0}}, true},
		{Peer{UID: 1001, GID: 1001, Groups: []uint32{7}}, false},
		{Peer{UID: 1000, Err: os.ErrPermission}, false},
	} {
		if got := peers.allowed(&tc.p); got != tc.want {
			t.Errorf("peer %+v allowed=%v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestConfigRequestAnyOrigin(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(`{"version":1,"ceiling":{"capabilities":{"request":{"origins":["*"]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ceil, _ := c.Ceiling.JobCeiling()
	if !ceil.Broker.AllowRequest || ceil.Broker.Origins != nil {
		t.Errorf("origins [*]: %+v", ceil.Broker)
	}
	_, err = ParseConfig(strings.NewReader(`{"version":1,"ceiling":{"capabilities":{"request":{"origins":["*","https://a.example"]}}}}`))
	if err == nil {
		t.Error(`"*" with other origins accepted`)
	}
}

// TestConfigSecretReadOnce: a secret's value_file is read when the config
// is loaded, and that value is what the server applies; a file changed or
// gone afterwards does not matter until the next load (a reload).
func TestConfigSecretReadOnce(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("Bearer first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(strings.NewReader(`{"version": 1, "ceiling": {"secrets": {"api": {"value_file": "` + secret + `", "origins": ["https://api.example.com"]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(secret); err != nil {
		t.Fatal(err)
	}
	s := &Server{log: slog.New(slog.DiscardHandler)}
	st, err := s.newState(c)
	if err != nil {
		t.Fatalf("state from a loaded config whose secret file is gone since: %v", err)
	}
	if got := st.ceil.Broker.Secrets["api"].Value; got != "Bearer first" {
		t.Errorf("secret %q, want the value read at load", got)
	}

	// A Config built in code is checked and defaulted as loading would.
	st, err = s.newState(&Config{Version: ConfigVersion})
	if err != nil || st.cfg.MaxConcurrency != runtime.NumCPU() || !st.ceil.Broker.AllowLog {
		t.Errorf("a Config built in code: %v, %+v", err, st)
	}
	if _, err := s.newState(&Config{}); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("a Config built in code without a version: %v", err)
	}
}

func TestConfigMetricsListen(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"version": 1}`: "",
		`{"version": 1, "metrics": {"listen": "127.0.0.1:9464"}}`:  "",
		`{"version": 1, "metrics": {"listen": "[::1]:9464"}}`:      "",
		`{"version": 1, "metrics": {"listen": "9464"}}`:            "metrics.listen",
		`{"version": 1, "metrics": {"listen": "localhost:http"}}`:  "metrics.listen",
		`{"version": 1, "metrics": {"listen": "127.0.0.1:70000"}}`: "metrics.listen",
		`{"version": 1, "metrics": {"port": 9464}}`:                "metrics.port",
	} {
		_, err := ParseConfig(strings.NewReader(cfg))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", cfg, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error naming %s", cfg, err, want)
		}
	}
}

// TestConfigCountsJobIDSlotsOfWaitingStarts: each prestarted init stage
// and each warm runtime holds a job id slot while it waits, beside the
// runs' own. A config whose max_concurrency alone fit jail.MaxJobs was
// taken, and with every run going, a run found no slot free (ErrNoSlot):
// max_concurrency 16384, its default prestart 64 and warm.deno 64 in each
// of 8 templates need 16960. It is refused, naming the fields, at start
// and at reload alike (both load the file), and one that fits is taken.
func TestConfigCountsJobIDSlotsOfWaitingStarts(t *testing.T) {
	waiting := MaxPool + jail.DefaultWarmTemplates*MaxWarm
	for _, tc := range []struct {
		cfg  string
		want string // "" when it fits
	}{
		{fmt.Sprintf(`{"version": 1, "max_concurrency": %d}`, jail.MaxJobs), "max_concurrency, prestart, warm: "},
		{fmt.Sprintf(`{"version": 1, "max_concurrency": %d}`, jail.MaxJobs-waiting+1), fmt.Sprintf("lower max_concurrency to %d", jail.MaxJobs-waiting)},
		{fmt.Sprintf(`{"version": 1, "max_concurrency": %d}`, jail.MaxJobs-waiting), ""},
		{fmt.Sprintf(`{"version": 1, "max_concurrency": %d, "prestart": -1, "warm": {"deno": 0}}`, jail.MaxJobs), ""},
		{fmt.Sprintf(`{"version": 1, "max_concurrency": %d, "prestart": 1, "warm": {"deno": 0}}`, jail.MaxJobs), "1 prestarted init stages"},
		// python's count is a template's as much as deno's.
		{fmt.Sprintf(`{"version": 1, "max_concurrency": %d, "prestart": -1, "warm": {"deno": 0, "python": 1}}`, jail.MaxJobs-jail.DefaultWarmTemplates+1), "up to 8 warm runtimes"},
	} {
		_, err := ParseConfig(strings.NewReader(tc.cfg))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it taken", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	// A config built in code is checked as a loaded one is.
	c := &Config{Version: ConfigVersion, MaxConcurrency: jail.MaxJobs}
	if err := c.check(); err == nil || !strings.Contains(err.Error(), "max_concurrency, prestart, warm") {
		t.Errorf("a config built in code: %v, want the slots refused", err)
	}
}
