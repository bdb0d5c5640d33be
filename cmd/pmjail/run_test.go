package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
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
		// A bare number is bytes: said so, with the unit that was meant.
		{[]string{"--memory", "64", "a.js"}, 0, "--memory: 64 bytes is below the 16M minimum (a size without a unit is bytes: 64M?)"},
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

// The run flags may follow the FILE; a duration takes its unit.
func TestRunFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.js")
	if err := os.WriteFile(file, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newRunFlags("run", false)
	req, err := f.programRequest([]string{file, "--json", "--timeout", "2s", "--cpu-time=1500ms"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.jsonOut || req.Limits.Timeout != profiles.Duration(2*time.Second) || req.Limits.CPUTime != profiles.Duration(1500*time.Millisecond) || req.Source != "1" {
		t.Errorf("json %v limits %+v source %q", f.jsonOut, req.Limits, req.Source)
	}
	for _, args := range [][]string{
		{"--timeout", "5", file},
		{file, "--cpu-time", "2.5"},
		{file, "--timeout", " 30 "},
	} {
		_, err := newRunFlags("run", false).programRequest(args)
		if err == nil || !strings.Contains(err.Error(), "needs a unit") || !strings.HasPrefix(err.Error(), "--") {
			t.Errorf("%q: %v, want the flag named as needing a unit", args, err)
		}
	}
	// --runtime is typed by a person: any case, sent on as the socket API
	// spells it (a job pmjail submit sends crosses it).
	for in, want := range map[string]string{"PYTHON": "python", "TypeScript": "typescript", "deno": "deno", "TSX": "tsx", "jsx": "jsx"} {
		req, err := newRunFlags("run", false).programRequest([]string{"--runtime", in, file})
		if err != nil || req.Runtime != want {
			t.Errorf("--runtime %s: %v, runtime %q, want %q", in, err, req.Runtime, want)
			continue
		}
		if _, err := job.Resolve(req, job.DefaultCeiling(), true); err != nil {
			t.Errorf("--runtime %s: %v", in, err)
		}
	}
	// A file's extension names its runtime, Deno's dialect included.
	for ext, want := range map[string]string{".js": "deno", ".mjs": "deno", ".ts": "typescript", ".mts": "typescript", ".jsx": "jsx", ".tsx": "tsx", ".TSX": "tsx", ".py": "python"} {
		named := filepath.Join(t.TempDir(), "page"+ext)
		if err := os.WriteFile(named, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		req, err := newRunFlags("run", false).programRequest([]string{"--no-stdin", named})
		if err != nil || req.Runtime != want {
			t.Errorf("run page%s: %v, request %+v, want runtime %q", ext, err, req, want)
		}
	}
	for _, args := range [][]string{{file, "--timeout", "+2s"}, {file, "--memory", "+64M"}} {
		if _, err := newRunFlags("run", false).programRequest(args); err == nil || !strings.Contains(err.Error(), "invalid") {
			t.Errorf("%q: %v, want a sign refused", args, err)
		}
	}
	// An empty --input (a --input "$X" whose X is unset) is no JSON; it
	// ran the job on null.
	for _, v := range []string{"", " "} {
		_, err := newRunFlags("run", false).programRequest([]string{"--input", v, file})
		if err == nil || !strings.HasPrefix(err.Error(), `--input "`+v+`": empty: want one JSON value`) {
			t.Errorf("--input %q: %v, want it refused as empty", v, err)
		}
	}
	// No program: the forms it may take are named, a DIR among them.
	for _, args := range [][]string{{"--json"}, {file, file}} {
		_, err := newRunFlags("run", false).programRequest(args)
		if err == nil || !strings.HasPrefix(err.Error(), "want exactly one FILE, DIR or - (stdin), got ") {
			t.Errorf("%q: %v, want FILE, DIR or - named", args, err)
		}
	}
	_, err = newRunFlags("run", false).programRequest([]string{file, "--timeout", "soon"})
	if err == nil || err.Error() != `--timeout "soon": invalid duration "soon" (want e.g. 2s, 500ms or 1m)` {
		t.Errorf("--timeout soon: %v", err)
	}
}

func TestValueLine(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string // "" for nothing printed
	}{
		{"", ""},
		{"null", ""},
		{" null ", ""},
		{"0", "0\n"},
		{`""`, "\"\"\n"},
		{"{\n  \"a\": [1, 2],\n  \"s\": \"x\\ny\"\n}", `{"a":[1,2],"s":"x\ny"}` + "\n"},
	} {
		line, ok := valueLine(json.RawMessage(tc.value))
		if got := string(line); ok != (tc.want != "") || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.value, got, ok, tc.want)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var b bytes.Buffer
	w := &lineWriter{w: &b, ended: true}
	w.line([]byte("1\n"))
	_, _ = w.Write([]byte("part"))
	w.line([]byte("2\n"))
	_, _ = w.Write([]byte("whole\n"))
	w.line([]byte("3\n"))
	if b.String() != "1\npart\n2\nwhole\n3\n" {
		t.Errorf("%q", b.String())
	}
}

// submit's flags that it would ignore, or read as their default, are
// refused, naming them: --tenant and --id without --nats went nowhere
// (the job ran on the socket); an empty --nats submitted to the socket;
// an empty --socket said only "dial unix: missing address".
func TestSubmitFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "ci", "a.js"}, "--tenant: only with --nats"},
		{[]string{"--id", "x", "--nats-creds", "c", "a.js"}, "--id, --nats-creds: only with --nats"},
		{[]string{"--nats", " ", "a.js"}, "--nats: empty (name the NATS servers, or leave the flag out to submit to the socket)"},
		{[]string{"--socket", "", "a.js"}, "--socket: empty path (leave the flag out for /run/pmjail/pmjail.sock)"},
		{[]string{"--nats", "nats://q:4222", "--socket", "/s", "a.js"}, "--socket: not with --nats (the job goes to the queue)"},
		{[]string{"--socket", "/s", "a.js"}, ""},
		{[]string{"--nats", "nats://q:4222", "--tenant", "ci", "--id", "x", "a.js"}, ""},
	} {
		f := newRunFlags("submit", false)
		f.fs.String("socket", client.DefaultSocketPath, "")
		nf := natsFlags(f.fs)
		if err := f.fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		err := checkSubmitFlags(f.fs, nf)
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A run whose state directory the jails cannot reach is refused before
// it starts, the directory named: each Python run (and each run once the
// Deno caches were built there) failed as pmjail's own internal_error.
func TestRunRefusesUnreachableState(t *testing.T) {
	modules, err := filepath.Abs("../../node_modules")
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(filepath.Join(modules, "@deno", "linux-x64-glibc", "deno"))
	testenv.Need(t, statErr == nil, "the runtimes `make setup` installs in node_modules")
	private := t.TempDir() // 0700, as mktemp -d makes it
	t.Setenv(runtimes.EnvRuntimeDir, modules)
	t.Setenv(runtimes.EnvStateDir, filepath.Join(private, "state"))
	_, err = newRunner(true, true)
	if !errors.Is(err, runtimes.ErrUnreachable) || !strings.Contains(err.Error(), "chmod o+x ") {
		t.Fatalf("newRunner with the state below a 0700 directory: %v, want it refused as unreachable", err)
	}
}
