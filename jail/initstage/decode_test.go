package initstage

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes"
)

// ignoredProcessFields are the fields of specs.Process the init stage does
// not act on, by JSON name: the guest's capabilities, no_new_privs and
// working directory are the init stage's own decisions (none, set, "/"),
// and it has no terminal, AppArmor, SELinux, OOM score, scheduler, I/O
// priority or CPU affinity support.
var ignoredProcessFields = []string{
	"terminal", "consoleSize", "commandLine", "cwd", "capabilities", "noNewPrivileges",
	"apparmorProfile", "oomScoreAdj", "selinuxLabel", "scheduler", "ioPriority", "execCPUAffinity",
}

func jsonNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// Every field of the spec's process is either decoded or known to be
// ignored: a new runtime-spec field fails here until someone decides.
func TestWireProcess(t *testing.T) {
	wire := jsonNames(reflect.TypeFor[wireProcess]())
	for _, name := range jsonNames(reflect.TypeFor[specs.Process]()) {
		in, ignored := slices.Contains(wire, name), slices.Contains(ignoredProcessFields, name)
		if in == ignored {
			t.Errorf("specs.Process field %q: decoded %v, ignored %v; want exactly one", name, in, ignored)
		}
	}
	procType := reflect.TypeFor[specs.Process]()
	for f := range reflect.TypeFor[wireProcess]().Fields() {
		sf, ok := procType.FieldByName(f.Name)
		if !ok || sf.Type != f.Type || sf.Tag.Get("json") != f.Tag.Get("json") { // same name, type, JSON tag
			t.Errorf("wireProcess.%s (%v %q) is not specs.Process's", f.Name, f.Type, f.Tag.Get("json"))
		}
	}
}

// What the supervisor encodes, the init stage decodes: every Config field,
// and the process's args, environment, ids and rlimits.
func TestDecodeConfig(t *testing.T) {
	umask := uint32(0o22)
	oom := 5
	sent := Config{
		Process: &specs.Process{
			Terminal: true, User: specs.User{UID: 1000, GID: 1001, Umask: &umask, AdditionalGids: []uint32{7}, Username: "u"},
			Args: []string{"/bin/x", "-y"}, Env: []string{"A=1", "B=2"}, Cwd: "/work",
			Capabilities:    &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 64, Soft: 32}},
			NoNewPrivileges: true, OOMScoreAdj: &oom, Scheduler: &specs.Scheduler{Policy: "SCHED_OTHER"},
		},
		Hostname:     "pmjail",
		Mounts:       []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid"}}},
		WritableRoot: true,
		Namespaces:   []specs.LinuxNamespaceType{specs.UserNamespace, specs.MountNamespace},
		Files:        []runtimes.File{{Path: "/pmjail/x.js", Data: []byte{0, 1, 2, 255}, Mode: 0o644}},
		Seccomp:      []byte{9, 8, 7},
		HostMountNS:  4026531841,
		Landlock:     true,
		Channel:      true,
		CgroupJoin:   3,
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(&sent); err != nil {
		t.Fatal(err)
	}
	got, err := decodeConfig(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := sent
	p := sent.Process
	want.Process = &specs.Process{User: p.User, Args: p.Args, Env: p.Env, Rlimits: p.Rlimits}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
	}
	// Every Config field took part (none left at its zero value).
	v := reflect.ValueOf(want)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("the test leaves Config.%s unset", v.Type().Field(i).Name)
		}
	}

	if _, err := decodeConfig(strings.NewReader(`{"process":`)); err == nil {
		t.Errorf("a truncated configuration decoded")
	}
	empty, err := decodeConfig(strings.NewReader(`{}`))
	if err != nil || empty.Process != nil {
		t.Errorf("{} decoded to %+v, %v", empty, err)
	}
}

// TestWarmSampleDecodes: the warm-up sample is a whole configuration, every
// field set, so warming reaches every type the real one holds.
func TestWarmSampleDecodes(t *testing.T) {
	cfg, err := decodeConfig(strings.NewReader(warmSample))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Process == nil || len(cfg.Process.Rlimits) != 1 || len(cfg.Mounts) != 1 || len(cfg.Files) != 1 ||
		len(cfg.Seccomp) != 1 || !cfg.Landlock || !cfg.Channel || cfg.CgroupJoin != 1 || cfg.HostMountNS != 1 ||
		len(cfg.Namespaces) != 1 || cfg.Hostname != "h" || len(cfg.Mounts[0].Options) != 1 {
		t.Fatalf("sample decoded to %+v", cfg)
	}
}

// BenchmarkDecodeConfig decodes a configuration the size of a Deno hello's
// (~17 KB of JSON: the guest's files and the filter as base64), with
// encoding/json's reflection already built, as in a prestarted init stage.
func BenchmarkDecodeConfig(b *testing.B) {
	cfg := Config{
		Process:  &specs.Process{Args: []string{"/deno", "run", "/pmjail/bootstrap.js"}, Env: []string{"HOME=/tmp"}},
		Hostname: "pmjail",
		Mounts:   []specs.Mount{{Destination: "/deno", Type: "bind", Source: "/deno", Options: []string{"ro"}}},
		Files: []runtimes.File{
			{Path: "/pmjail/bootstrap.js", Data: bytes.Repeat([]byte("x"), 3<<10), Mode: 0o444},
			{Path: "/pmjail/channel.js", Data: bytes.Repeat([]byte("y"), 6<<10), Mode: 0o444},
			{Path: "/job/main.js", Data: []byte(`console.log("hello")`), Mode: 0o444},
		},
		Seccomp: bytes.Repeat([]byte{1}, 1540),
	}
	data, err := json.Marshal(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	warmDecoder()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := decodeConfig(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
