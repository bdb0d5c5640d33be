package job

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
)

// A run takes its filter from the state directory's cache when it can trust
// the entry, and compiles it otherwise: a tampered cache never weakens the
// jail and a broken one never fails a run.
func TestFilterCache(t *testing.T) {
	in := &runtimes.Install{StateDir: filepath.Join(t.TempDir(), "state")}
	p, err := profiles.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	r := &Resolved{Profile: p, Kind: "native"}
	// Each run is a fresh Runner, as each CLI run is.
	run := func() filter {
		t.Helper()
		f, err := (&Runner{Install: in}).filter(r)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	compiled := run()
	cache := seccomp.Cache{Dir: filepath.Join(in.StateDir, "seccomp")}
	src, err := p.SeccompSource("native")
	if err != nil {
		t.Fatal(err)
	}
	opt := filterOptions(p)
	if _, err := cache.Load(src.Data, opt); err != nil {
		t.Fatalf("the first run left no entry: %v", err)
	}
	if f := run(); !bytes.Equal(f.program, compiled.program) || f.errno != compiled.errno {
		t.Fatal("a cached filter differs from the compiled one")
	}

	// An entry planted under the policy's key: an allow-all filter.
	weak, err := seccomp.Compile(&specs.LinuxSeccomp{DefaultAction: specs.ActAllow}, opt)
	if err != nil {
		t.Fatal(err)
	}
	plant := func() {
		t.Helper()
		if err := os.Chmod(cache.Dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(cache.Dir, os.Geteuid(), os.Getegid()); err != nil {
			t.Fatal(err)
		}
		if err := cache.Store(src.Data, opt, weak); err != nil {
			t.Fatal(err)
		}
	}
	plant()
	if f := run(); bytes.Equal(f.program, compiled.program) {
		t.Fatal("a trusted entry was not used") // else the checks below prove nothing
	}

	plant()
	if err := os.Chmod(cache.Dir, 0o770); err != nil {
		t.Fatal(err)
	}
	if f := run(); !bytes.Equal(f.program, compiled.program) {
		t.Fatal("an entry in a group-writable cache directory was used")
	}

	if os.Geteuid() == 0 {
		plant()
		if err := os.Chown(cache.Dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if f := run(); !bytes.Equal(f.program, compiled.program) {
			t.Fatal("an entry in a cache directory of another uid was used")
		}
	}

	// A corrupt entry is compiled again and rewritten.
	plant()
	entries, _ := os.ReadDir(cache.Dir)
	for _, e := range entries {
		if err := os.WriteFile(filepath.Join(cache.Dir, e.Name()), []byte("PMJSCCE1 garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if f := run(); !bytes.Equal(f.program, compiled.program) {
		t.Fatal("a corrupt entry was used")
	}
	got, err := cache.Load(src.Data, opt)
	if err != nil {
		t.Fatalf("the corrupt entry was not rewritten: %v", err)
	}
	if b, _ := got.MarshalBinary(); !bytes.Equal(b, compiled.program) {
		t.Fatal("the corrupt entry was rewritten with another program")
	}
}

// Without runtimes there is no state directory and so no cache: the filter
// is compiled as ever.
func TestFilterWithoutInstall(t *testing.T) {
	p, err := profiles.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Runner{}).filter(&Resolved{Profile: p, Kind: "native"}); err != nil {
		t.Fatal(err)
	}
}

func TestPrepareFilters(t *testing.T) {
	in := &runtimes.Install{StateDir: filepath.Join(t.TempDir(), "state")}
	dir, n, err := PrepareFilters(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * len(profiles.Names()); n != want {
		t.Fatalf("prepared %d, want %d", n, want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("%s: %v %v", dir, entries, err)
	}
}

// A hit neither decodes the policy nor compiles it: here a policy that
// would not decode is served from its entry.
func TestFilterCacheHitDecodesNothing(t *testing.T) {
	dir := t.TempDir()
	in := &runtimes.Install{StateDir: filepath.Join(dir, "state")}
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte("not a policy"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &profiles.Profile{Name: "file", Seccomp: map[string]string{"native": policy}}
	r := &Resolved{Profile: p, Kind: "native"}
	if _, err := (&Runner{Install: in}).filter(r); err == nil {
		t.Fatal("an undecodable policy compiled")
	}

	prog, err := seccomp.Compile(&specs.LinuxSeccomp{DefaultAction: specs.ActErrno}, filterOptions(p))
	if err != nil {
		t.Fatal(err)
	}
	cache := seccomp.Cache{Dir: filepath.Join(in.StateDir, "seccomp")}
	if err := cache.Store([]byte("not a policy"), filterOptions(p), prog); err != nil {
		t.Fatal(err)
	}
	f, err := (&Runner{Install: in}).filter(r)
	if err != nil {
		t.Fatalf("a hit decoded or compiled the policy: %v", err)
	}
	if want, _ := prog.MarshalBinary(); !bytes.Equal(f.program, want) || f.errno != prog.Errno {
		t.Fatal("the hit returned another program")
	}
}

// Two profiles with one name but different policies get each its own
// filter from one Runner (a daemon): the filter is keyed by the policy, not
// by the profile's name.
func TestFilterKeyedByPolicy(t *testing.T) {
	dir := t.TempDir()
	base, err := profiles.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]string{
		"allow.json": `{"defaultAction": "SCMP_ACT_ALLOW"}`,
		"deny.json":  `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW"}]}`,
	}
	rn := &Runner{}
	var programs [][]byte
	for file, policy := range policies {
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
		p := *base
		p.Name = "custom"
		p.Seccomp = map[string]string{"native": path}
		f, err := rn.filter(&Resolved{Profile: &p, Kind: "native"})
		if err != nil {
			t.Fatal(err)
		}
		programs = append(programs, f.program)
	}
	if bytes.Equal(programs[0], programs[1]) {
		t.Fatal("two different policies under one profile name got the same filter")
	}
}
