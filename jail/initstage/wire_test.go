package initstage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// Fields of the spec's types the wire carries. The rest of specs.Process
// is listed in ignoredProcessFields (tests check both cover every field).
var (
	wireProcessFields = []string{"User", "Args", "Env", "Cwd", "Rlimits"}
	wireUserFields    = []string{"UID", "GID", "Umask", "AdditionalGids", "Username"}
	wireRlimitFields  = []string{"Type", "Hard", "Soft"}
	wireMountFields   = []string{"Destination", "Type", "Source", "Options"}
)

// ignoredProcessFields are what the init stage decides itself, whatever
// the spec says: the guest's capabilities (none) and no_new_privs (set);
// and what it has no support for: a terminal,
// AppArmor, SELinux, OOM score, scheduler, I/O priority, CPU affinity.
var ignoredProcessFields = []string{
	"Terminal", "ConsoleSize", "CommandLine", "Capabilities", "NoNewPrivileges",
	"ApparmorProfile", "OOMScoreAdj", "SelinuxLabel", "Scheduler", "IOPriority", "ExecCPUAffinity",
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		names = append(names, f.Name)
	}
	return names
}

// Every field of the spec types the wire carries is either encoded or
// known to be ignored: a new runtime-spec field fails here until someone
// decides.
func TestWireCoversTheSpec(t *testing.T) {
	for _, c := range []struct {
		typ              reflect.Type
		encoded, ignored []string
	}{
		{reflect.TypeFor[specs.Process](), wireProcessFields, ignoredProcessFields},
		{reflect.TypeFor[specs.User](), wireUserFields, nil},
		{reflect.TypeFor[specs.POSIXRlimit](), wireRlimitFields, nil},
		// ID-mapped mounts are refused when encoding.
		{reflect.TypeFor[specs.Mount](), wireMountFields, []string{"UIDMappings", "GIDMappings"}},
		{reflect.TypeFor[layout.File](), []string{"Path", "Data", "Mode"}, nil},
	} {
		names := fieldNames(c.typ)
		for _, name := range names {
			in, ignored := slices.Contains(c.encoded, name), slices.Contains(c.ignored, name)
			if in == ignored {
				t.Errorf("%v field %s: encoded %v, ignored %v; want exactly one", c.typ, name, in, ignored)
			}
		}
		for _, name := range slices.Concat(c.encoded, c.ignored) {
			if !slices.Contains(names, name) {
				t.Errorf("%v has no field %s", c.typ, name)
			}
		}
	}
}

// fullConfig sets every Config field and every encoded field of the spec
// types, and some the init stage ignores.
func fullConfig() Config {
	umask := uint32(0o22)
	oom := 5
	return Config{
		Process: &specs.Process{
			Terminal: true, User: specs.User{UID: 1000, GID: 1001, Umask: &umask, AdditionalGids: []uint32{7, 1 << 31}, Username: "u"},
			Args: []string{"/bin/x", "-y", ""}, Env: []string{"A=1", "B=2"}, Cwd: "/work",
			Capabilities:    &specs.LinuxCapabilities{Bounding: []string{"CAP_SYS_ADMIN"}},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 64, Soft: 32}, {Type: "RLIMIT_AS", Hard: ^uint64(0), Soft: 1 << 40}},
			NoNewPrivileges: true, OOMScoreAdj: &oom, Scheduler: &specs.Scheduler{Policy: "SCHED_OTHER"},
		},
		Hostname:     "pmjail",
		Mounts:       []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev"}}},
		WritableRoot: true,
		Namespaces:   []specs.LinuxNamespaceType{specs.UserNamespace, specs.MountNamespace},
		Files:        []layout.File{{Path: "/pmjail/x.js", Data: []byte{0, 1, 2, 255}, Mode: 0o644}, {Path: "/job/empty", Mode: 0o444}},
		Seccomp:      []byte{9, 8, 7},
		HostMountNS:  4026531841,
		Landlock:     true,
		Channel:      true,
		Stdin:        "/pmjail/stdin",
		AwaitStart:   true,
	}
}

func encodeConfig(t testing.TB, cfg *Config) []byte {
	t.Helper()
	data, err := cfg.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// What the supervisor encodes, the init stage decodes: every Config field,
// and the process's args, environment, working directory, ids and
// rlimits.
func TestConfigRoundTrip(t *testing.T) {
	sent := fullConfig()
	got, err := readConfig(bytes.NewReader(encodeConfig(t, &sent)), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sent
	p := sent.Process
	want.Process = &specs.Process{User: p.User, Args: p.Args, Env: p.Env, Cwd: p.Cwd, Rlimits: p.Rlimits}
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

	var empty Config
	got, err = readConfig(bytes.NewReader(encodeConfig(t, &empty)), nil)
	if err != nil || !reflect.DeepEqual(got, empty) {
		t.Errorf("the zero Config decoded to %+v, %v", got, err)
	}
}

func TestConfigRefusesIDMappedMounts(t *testing.T) {
	cfg := Config{Mounts: []specs.Mount{{Destination: "/d", Type: "bind", Source: "/s",
		UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1, Size: 1}}}}}
	if _, err := cfg.MarshalBinary(); err == nil || !strings.Contains(err.Error(), "ID-mapped") {
		t.Fatalf("an ID-mapped mount encoded: %v", err)
	}
}

// A message that is cut short, has bytes to spare, comes from another
// build or claims more than it holds is refused with an error, and none
// makes the decoder allocate what a length field claims.
func TestConfigRefusesMalformedMessages(t *testing.T) {
	cfg := fullConfig()
	data := encodeConfig(t, &cfg)
	body := data[4:]
	for i := range len(body) {
		var c Config
		if err := c.UnmarshalBinary(body[:i]); err == nil {
			t.Fatalf("a body cut to %d of %d bytes decoded", i, len(body))
		}
	}
	var c Config
	if err := c.UnmarshalBinary(append(slices.Clone(body), 0)); err == nil || !strings.Contains(err.Error(), "left over") {
		t.Errorf("a body with a byte to spare: %v", err)
	}
	report, _ := (&Report{Error: "x"}).MarshalBinary()
	if err := c.UnmarshalBinary(report[4:]); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("a report decoded as a configuration: %v", err)
	}
	// A count of 2^60 strings, in a body of a few bytes.
	huge := binary.LittleEndian.AppendUint32(nil, configMagic)
	huge = append(huge, 1, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10)
	if err := c.UnmarshalBinary(huge); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("a huge count: %v", err)
	}

	// The stream: a prefix longer than the limit, or than what follows.
	long := []byte{0xff, 0xff, 0xff, 0x7f}
	if _, err := readConfig(bytes.NewReader(long), nil); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("a 2 GiB prefix: %v", err)
	}
	if _, err := readConfig(bytes.NewReader(data[:len(data)-1]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a message cut short: %v, want ErrUnexpectedEOF", err)
	}
	if _, err := readConfig(bytes.NewReader(nil), nil); !errors.Is(err, io.EOF) {
		t.Errorf("no message: %v, want EOF", err)
	}
}

func TestReportRoundTrip(t *testing.T) {
	for _, sent := range []Report{
		{},
		{Error: "mount /proc: permission denied", Stage: StageRoot, Layer: LayerRootfs, ExitCode: 125},
		{Error: "exec /bin/x: no such file or directory", Stage: StageExec, ExitCode: 127},
		{Landlock: 4, FDs: []string{FDChannelIn, FDChannelOut, FDSeccomp}, Premounted: true},
		{Landlock: 0, LandlockReason: "not supported", ExitCode: -1},
		{Started: true, FDs: []string{FDRuntime}},
		{Exited: true, ExitCode: 137, Signal: 9},
	} {
		data, err := sent.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		body, err := readMessage(bytes.NewReader(data), maxReportSize)
		if err != nil || len(body) != len(data)-4 {
			t.Fatalf("readMessage: %d bytes, %v; want %d", len(body), err, len(data)-4)
		}
		var got Report
		if err := got.UnmarshalBinary(body); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, sent) {
			t.Errorf("decoded %+v, want %+v", got, sent)
		}
	}
	if _, err := readMessage(bytes.NewReader([]byte{0, 0, 0, 1}), maxReportSize); err == nil {
		t.Errorf("a 16 MiB report's length was accepted")
	}
	if _, err := readMessage(bytes.NewReader([]byte{1, 0}), maxReportSize); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a 2-byte prefix: %v, want ErrUnexpectedEOF", err)
	}
}

// TestJoinRoundTrip: a join decodes to what was sent, and no other
// message passes for one (a configuration sent twice, a report).
func TestJoinRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 5} {
		data, err := (&Join{TaskFiles: n}).MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		body, err := readMessage(bytes.NewReader(data), maxJoinSize)
		if err != nil {
			t.Fatal(err)
		}
		var got Join
		if err := got.UnmarshalBinary(body); err != nil || got.TaskFiles != n {
			t.Errorf("decoded %+v, %v; want %d task files", got, err, n)
		}
	}
	cfg, err := (&Config{Hostname: "h"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	report, err := (&Report{Error: "x"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range [][]byte{cfg, report} {
		var j Join
		if err := j.UnmarshalBinary(other[4:]); err == nil {
			t.Errorf("%x decoded as a join: %+v", other[:8], j)
		}
	}
}

// TestPremountThenConfig: a premount decodes to what was sent and is
// handed over before the configuration that follows it; a configuration
// alone comes through without one; readConfig without premount and a join
// refuse one.
func TestPremountThenConfig(t *testing.T) {
	cfg := fullConfig()
	prep := Premount{Mounts: cfg.Mounts, HostMountNS: 4026531840}
	prepData, err := prep.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	cfgData := encodeConfig(t, &cfg)
	// What the wire keeps of cfg (see TestConfigRoundTrip).
	cfg, err = readConfig(bytes.NewReader(cfgData), nil)
	if err != nil {
		t.Fatal(err)
	}

	var got []*Premount
	decoded, err := readConfig(bytes.NewReader(append(slices.Clone(prepData), cfgData...)), func(p *Premount) { got = append(got, p) })
	if err != nil || !reflect.DeepEqual(decoded, cfg) {
		t.Fatalf("configuration after a premount: %+v, %v", decoded, err)
	}
	if len(got) != 1 || !reflect.DeepEqual(*got[0], prep) {
		t.Errorf("premounts handed over: %+v, want one: %+v", got, prep)
	}
	got = nil
	if decoded, err := readConfig(bytes.NewReader(cfgData), func(p *Premount) { got = append(got, p) }); err != nil || !reflect.DeepEqual(decoded, cfg) || len(got) != 0 {
		t.Errorf("a configuration alone: %+v, %v, premounts %+v", decoded, err, got)
	}
	if _, err := readConfig(bytes.NewReader(prepData), nil); err == nil {
		t.Error("readConfig without premount took a premount for a configuration")
	}
	// Two premounts: the second is no configuration.
	if _, err := readConfig(bytes.NewReader(append(slices.Clone(prepData), prepData...)), func(*Premount) {}); err == nil {
		t.Error("a second premount was taken for a configuration")
	}
	var j Join
	if err := j.UnmarshalBinary(prepData[4:]); err == nil {
		t.Errorf("a premount decoded as a join: %+v", j)
	}
	if _, err := (&Premount{Mounts: []specs.Mount{{Destination: "/x", UIDMappings: []specs.LinuxIDMapping{{Size: 1}}}}}).MarshalBinary(); err == nil {
		t.Error("an ID-mapped mount was encoded in a premount")
	}
}

// FuzzConfig: whatever the bytes, decoding returns (no panic, no huge
// allocation), and what decodes encodes back to the same bytes.
func FuzzConfig(f *testing.F) {
	cfg := fullConfig()
	f.Add(encodeConfig(f, &cfg)[4:])
	var empty Config
	f.Add(encodeConfig(f, &empty)[4:])
	f.Fuzz(func(t *testing.T, body []byte) {
		var c Config
		if err := c.UnmarshalBinary(body); err != nil {
			return
		}
		again, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var c2 Config
		if err := c2.UnmarshalBinary(again[4:]); err != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("re-encoded configuration decoded to %+v, %v; want %+v", c2, err, c)
		}
	})
}

// BenchmarkDecodeConfig decodes a configuration the size of a Deno hello's
// (the guest's files and the filter, ~11 KB).
func BenchmarkDecodeConfig(b *testing.B) {
	cfg := Config{
		Process:  &specs.Process{Args: []string{"/deno", "run", "/pmjail/bootstrap.js"}, Env: []string{"HOME=/tmp"}},
		Hostname: "pmjail",
		Mounts:   []specs.Mount{{Destination: "/deno", Type: "bind", Source: "/deno", Options: []string{"ro"}}},
		Files: []layout.File{
			{Path: "/pmjail/bootstrap.js", Data: bytes.Repeat([]byte("x"), 3<<10), Mode: 0o444},
			{Path: "/pmjail/channel.js", Data: bytes.Repeat([]byte("y"), 6<<10), Mode: 0o444},
			{Path: "/job/main.js", Data: []byte(`console.log("hello")`), Mode: 0o444},
		},
		Seccomp: bytes.Repeat([]byte{1}, 1540),
	}
	data := encodeConfig(b, &cfg)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := readConfig(bytes.NewReader(data), nil); err != nil {
			b.Fatal(err)
		}
	}
}
