package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/profiles"
)

// A refusal names the flag when the user set the value with it, and the
// job's field otherwise.
func TestRefusalNamesTheFlagSet(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "tiny.json")
	err := os.WriteFile(profile, []byte(`{"name": "tiny", "limits": {"memory": "64M", "cpu_time": "1s", "timeout": "1s", "pids": 8, "output": "1K", "tmp": "1M"},
		"seccomp": {"deno": "deno", "python": "pyodide", "native": "native"}}`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(filepath.Dir(profile), "small.json")
	if err := os.WriteFile(small, []byte(`{"name": "small", "limits": {"memory": "8M"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(filepath.Dir(profile), "missing.json")
	for _, tc := range []struct {
		args []string
		// memory is set in the job, not by a flag (a daemon's client can)
		memory int64
		want   string
	}{
		{[]string{"--memory", "8M", "a.js"}, 0, "--memory: 8M is below the 16M minimum"},
		{[]string{"--timeout", "2h", "a.js"}, 0, "--timeout: 2h0m0s is above the ceiling of 1h0m0s"},
		{[]string{"--pids", "5000", "a.js"}, 0, "--pids: 5000 is above the ceiling of 4096"},
		{[]string{"--output-limit", "1G", "a.js"}, 0, "--output-limit: 1G is above the ceiling of 256M"},
		{[]string{"--profile", "nosuch", "a.js"}, 0, `--profile: unknown profile "nosuch" (built-in profiles: default, strict)`},
		{[]string{"--profile", profile, "--cpu-time", "2h", "a.js"}, 0, "--cpu-time: 2h0m0s is above the ceiling of 10m0s"},
		// A profile file is named once, by the flag and its path.
		{[]string{"--profile", small, "a.js"}, 0, "--profile: " + small + ": limits.memory: 8M is below the 16M minimum"},
		{[]string{"--profile", missing, "a.js"}, 0, "--profile: open " + missing + ": no such file or directory"},
		// No flag set the memory: the field is named.
		{[]string{"--cpu-time", "2s", "a.js"}, 8 << 20, "limits.memory: 8M is below the 16M minimum"},
	} {
		f := newRunFlags("run", false)
		if err := f.fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		req, err := f.request()
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		req.Runtime, req.Source = "deno", "1"
		if tc.memory != 0 {
			req.Limits.Memory = profiles.Size(tc.memory)
		}
		_, err = job.Resolve(req, job.DefaultCeiling(), true)
		if err == nil {
			t.Fatalf("%q: resolved, want a refusal", tc.args)
		}
		if got := f.refusal(err); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
		}
	}
}
