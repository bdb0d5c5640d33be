package job

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
)

// FuzzDecodeResolve: whatever a client sends, the daemon's first two steps
// neither panic nor fail with anything but a request error, a job that
// decoded is refused, if at all, with the field at fault named (the
// client's answer carries it), and a job resolved against an operator's
// narrow ceiling stays inside it on every axis, checked here field by
// field rather than through Resolve's own Within.
func FuzzDecodeResolve(f *testing.F) {
	for _, seed := range []string{
		`{"runtime":"deno","source":"console.log(1)"}`,
		`{"runtime":"python","source":"print(1)","input":{"a":[1,2]},"mode":"required","profile":"strict"}`,
		`{"runtime":"deno","source":"x","limits":{"memory":"64M","cpu_time":"1s","timeout":500,"pids":9,"output":"1K","tmp":"2M"}}`,
		`{"runtime":"deno","source":"x","capabilities":{"log":true,"request":{"urls":["https://a.example"],"methods":["POST"],"auth":{"https://a.example":"k"}}}}`,
		`{"runtime":"typescript","source":"x","limits":{"memory":1e400}}`,
		// Refused by Resolve, each at one field.
		`{"runtime":"cobol","source":"x"}`,
		`{"runtime":"deno","source":"x","mode":"often"}`,
		`{"runtime":"deno","source":"x","limits":{"memory":"1M"}}`,
		`{"runtime":"deno","source":"x","limits":{"pids":99999}}`,
		// Refused by Decode: a key twice, a key in the wrong case.
		`{"runtime":"deno","source":"x","source":"y"}`,
		`{"runtime":"deno","Source":"x","input":{"k":1,"k":2}}`,
		`{"runtime":"deno","source":"x","capabilities":{"request":{"urls":["ftp://a"]}}}`,
		// Within the narrow ceiling, and just above it.
		`{"runtime":"deno","source":"x","profile":"strict","limits":{"memory":"96M","pids":12},"capabilities":{"request":{"urls":["https://A.example:443"]}}}`,
		`{"runtime":"deno","source":"x","profile":"strict","limits":{"tmp":"5M"},"capabilities":{"request":{"urls":["https://a.example"],"methods":["get","POST"]}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := Decode(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v is not a request error", data, err)
			}
			return
		}
		for _, ceil := range []Ceiling{DefaultCeiling(), narrowCeiling()} {
			r, err := Resolve(req, ceil, false)
			if err == nil {
				if why := outside(r, ceil); why != "" {
					t.Fatalf("%q: resolved outside the ceiling: %s", data, why)
				}
				continue
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v is not a request error", data, err)
			}
			if msg, field := Refusal(err); field == "" || !strings.HasPrefix(msg, field+": ") {
				t.Fatalf("%q: %q names no field (field %q)", data, msg, field)
			}
		}
	})
}

// narrowCeiling is an operator's ceiling below the profiles' defaults on
// every axis: one runtime, one profile, mode required, one origin and
// method, no log.
func narrowCeiling() Ceiling {
	c := Ceiling{
		Limits: profiles.Limits{
			Memory:  96 << 20,
			CPUTime: profiles.Duration(2 * time.Second),
			Timeout: profiles.Duration(3 * time.Second),
			Pids:    12,
			Output:  64 << 10,
			Tmp:     4 << 20,
		},
		Runtimes: []runtimes.Name{runtimes.Deno},
		Profiles: []string{"strict"},
		Mode:     ModeRequired,
		Broker: ipc.Ceiling{
			AllowRequest: true,
			Origins:      []string{"https://a.example"},
			Methods:      []string{"GET"},
		},
	}
	b, err := c.Broker.Prepare()
	if err != nil {
		panic(err)
	}
	c.Broker = b
	return c
}

// outside says how a resolved job exceeds ceil, or "" if it does not.
func outside(r *Resolved, ceil Ceiling) string {
	l, max := r.Limits, ceil.Limits
	for _, c := range []struct {
		name     string
		got, cap int64
	}{
		{"memory", int64(l.Memory), int64(max.Memory)},
		{"cpu_time", int64(l.CPUTime), int64(max.CPUTime)},
		{"timeout", int64(l.Timeout), int64(max.Timeout)},
		{"pids", l.Pids, max.Pids},
		{"output", int64(l.Output), int64(max.Output)},
		{"tmp", int64(l.Tmp), int64(max.Tmp)},
	} {
		if c.got <= 0 || c.got > c.cap {
			return fmt.Sprintf("limits.%s %d, ceiling %d", c.name, c.got, c.cap)
		}
	}
	if ceil.Runtimes != nil && !slices.Contains(ceil.Runtimes, r.Runtime) {
		return fmt.Sprintf("runtime %s", r.Runtime)
	}
	if ceil.Profiles != nil && !slices.Contains(ceil.Profiles, r.Profile.Name) {
		return fmt.Sprintf("profile %s", r.Profile.Name)
	}
	if ceil.Mode == ModeRequired && r.Mode != ModeRequired {
		return fmt.Sprintf("mode %s", r.Mode)
	}
	caps, b := r.Request.Capabilities, ceil.Broker
	if caps.Log && !b.AllowLog {
		return "log"
	}
	if caps.Request == nil {
		return ""
	}
	if !b.AllowRequest {
		return "request"
	}
	for _, u := range caps.Request.URLs {
		o, err := ipc.NormalizeOrigin(u)
		if err != nil || (b.Origins != nil && !slices.Contains(b.Origins, o)) {
			return fmt.Sprintf("origin %s", u)
		}
	}
	methods := caps.Request.Methods
	if len(methods) == 0 {
		methods = []string{"GET"}
	}
	for _, m := range methods {
		if b.Methods != nil && !slices.Contains(b.Methods, strings.ToUpper(m)) {
			return fmt.Sprintf("method %s", m)
		}
	}
	if len(caps.Request.Auth) > len(b.Secrets) {
		return "auth"
	}
	return ""
}
