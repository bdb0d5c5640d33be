package profiles_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/pmjail/pmjail/profiles"
)

func TestBuiltinSeccompProfiles(t *testing.T) {
	names := profiles.SeccompNames()
	if !slices.Equal(names, []string{"deno", "native", "pyodide"}) {
		t.Fatalf("built-in seccomp policies %v", names)
	}
	for _, name := range names {
		p, err := profiles.Seccomp(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.DefaultAction != specs.ActErrno {
			t.Errorf("%s: default action %q, want deny", name, p.DefaultAction)
		}
		allowed := map[string]bool{}
		for _, r := range p.Syscalls {
			if r.Action == specs.ActAllow {
				for _, n := range r.Names {
					allowed[n] = true
				}
			}
		}
		// The Go init stage's calls between Install and execve.
		for _, n := range []string{"sendmsg", "close", "execve", "futex", "rt_sigprocmask", "rt_sigreturn", "mmap", "clone"} {
			if !allowed[n] {
				t.Errorf("%s: does not allow %s", name, n)
			}
		}
		// No built-in profile allows a dangerous call (Compile would deny it
		// anyway; the data should not pretend otherwise).
		for _, n := range []string{"ptrace", "mount", "bpf", "clone3"} {
			if allowed[n] {
				t.Errorf("%s: allows %s", name, n)
			}
		}
	}
	if _, err := profiles.Seccomp("nope"); !errors.Is(err, profiles.ErrUnknownPolicy) {
		t.Fatalf("unknown profile: %v", err)
	}
	// Each call returns a fresh copy: a caller's edit must not leak.
	a, _ := profiles.Seccomp("deno")
	a.Syscalls = nil
	if b, _ := profiles.Seccomp("deno"); len(b.Syscalls) == 0 {
		t.Fatal("Seccomp returned shared state")
	}
}

func TestLoadSeccompFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],
		"syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},
		{"names":["ioctl"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":21505,"op":"SCMP_CMP_EQ"}]}]}`)
	p, err := profiles.LoadSeccompFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Syscalls) != 2 || p.Syscalls[1].Args[0].Value != 21505 {
		t.Fatalf("loaded %+v", p)
	}

	for _, tc := range []struct{ body, want string }{
		{`{"defaultAction":"SCMP_ACT_ERRNO","sycalls":[]}`, "sycalls: unknown field"},
		{`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW","comment":"x"}]}`, "syscalls[0].comment: unknown field"},
		{`{"defaultAction":"SCMP_ACT_ERRNO"} {}`, "data after the JSON value"},
		{`{"defaultAction":"SCMP_ACT_ERRNO"`, "bad.json: unexpected end of the JSON"},
	} {
		_, err := profiles.LoadSeccompFile(write("bad.json", tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
	if _, err := profiles.LoadSeccompFile(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	// A file without end is refused at the cap, not read into memory.
	if _, err := profiles.LoadSeccompFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("/dev/zero as a seccomp policy: %v", err)
	}
	if _, err := profiles.Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("/dev/zero as a profile: %v", err)
	}
}

func TestValidateSeccompNamesTheField(t *testing.T) {
	errno := func(n uint) *uint { return &n }
	allow := func(names ...string) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: names, Action: specs.ActAllow}
	}
	base := func(rules ...specs.LinuxSyscall) *specs.LinuxSeccomp {
		return &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: rules}
	}
	for _, tc := range []struct {
		name string
		p    *specs.LinuxSeccomp
		want string
	}{
		{"nil", nil, "no seccomp policy"},
		{"no default", &specs.LinuxSeccomp{}, "defaultAction: missing"},
		{"bad default", &specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_NOPE"}, `defaultAction: unknown action "SCMP_ACT_NOPE"`},
		{"bad action", base(allow("read"), allow("write"), allow("close"), specs.LinuxSyscall{Names: []string{"open"}, Action: "SCMP_ACT_FOO"}),
			`syscalls[3].action: unknown action "SCMP_ACT_FOO"`},
		{"trace", base(specs.LinuxSyscall{Names: []string{"open"}, Action: specs.ActTrace}), `syscalls[0].action: action "SCMP_ACT_TRACE" not supported`},
		{"notify", base(specs.LinuxSyscall{Names: []string{"open"}, Action: specs.ActNotify}), `syscalls[0].action: action "SCMP_ACT_NOTIFY" not supported`},
		{"unknown syscall", base(allow("read", "frobnicate")), `syscalls[0].names[1]: unknown syscall "frobnicate"`},
		{"empty name", base(allow("read", "")), "syscalls[0].names[1]: empty syscall name"},
		{"no names", base(specs.LinuxSyscall{Action: specs.ActAllow}), "syscalls[0].names: empty"},
		{"contradiction", base(allow("read", "ptrace"), specs.LinuxSyscall{Names: []string{"ptrace"}, Action: specs.ActErrno}),
			`syscalls[1].names[0]: syscall "ptrace" is both allowed and denied without conditions (see syscalls[0])`},
		{"arch", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX32}},
			`architectures[1]: unsupported architecture "SCMP_ARCH_X32"`},
		{"i386", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{specs.ArchX86}},
			`architectures[0]: unsupported architecture "SCMP_ARCH_X86"`},
		{"flag", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Flags: []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_TSYNC"}}, `flags[0]: unknown flag`},
		{"listener", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, ListenerPath: "/run/x.sock"}, "listenerPath: not supported"},
		{"errno on allow", base(specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActAllow, ErrnoRet: errno(1)}), "syscalls[0].errnoRet: only meaningful"},
		{"errno range", base(specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActErrno, ErrnoRet: errno(5000)}), "syscalls[0].errnoRet: 5000 out of range"},
		{"default errno on allow", &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, DefaultErrnoRet: errno(1)}, "defaultErrnoRet: only meaningful"},
		{"arg index", base(specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 6, Op: specs.OpEqualTo}}}),
			"syscalls[0].args[0].index: 6 out of range"},
		{"arg op", base(specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: "SCMP_CMP_ABOUT"}}}),
			`syscalls[0].args[0].op: unknown operator "SCMP_CMP_ABOUT"`},
		{"arg twice", base(specs.LinuxSyscall{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Op: specs.OpEqualTo}, {Index: 0, Op: specs.OpNotEqual, Value: 1}}}),
			"syscalls[0].args[1].index: argument 0 already checked"},
	} {
		err := profiles.ValidateSeccomp(tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	// Not contradictions: a conditional deny beside an allow, and a
	// syscall allowed twice.
	ok := base(allow("read", "ioctl"), allow("read"), specs.LinuxSyscall{Names: []string{"ioctl"}, Action: specs.ActErrno,
		Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0x5412, Op: specs.OpEqualTo}}})
	if err := profiles.ValidateSeccomp(ok); err != nil {
		t.Fatal(err)
	}
}

// TestValidateChecksSeccompRefs: a profile naming a built-in policy that
// does not exist, or a policy file that does not load, is refused by name.
func TestValidateChecksSeccompRefs(t *testing.T) {
	base, err := profiles.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"defaultAction":"SCMP_ACT_NOPE"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{
		"nope":      "seccomp.deno: seccomp policy \"nope\": unknown seccomp policy",
		bad:         "seccomp.deno: seccomp policy " + bad + ": defaultAction",
		"/missing/": "seccomp.deno: load seccomp policy",
	} {
		p := *base
		p.Seccomp = map[string]string{"deno": ref, "python": "pyodide", "native": "native"}
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("seccomp.deno %q: got %v, want an error containing %q", ref, err, want)
		}
	}
	if err := base.Validate(); err != nil {
		t.Fatalf("the default profile: %v", err)
	}
}

// TestSeccompSource: a profile's policy as stored is the bytes a compiled
// filter is cached by, and decodes to what SeccompPolicy returns.
func TestSeccompSource(t *testing.T) {
	p, err := profiles.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policy.json")
	body := []byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}`)
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	p.Seccomp = map[string]string{"deno": "deno", "python": file, "native": "native"}
	for kind, ref := range p.Seccomp {
		src, err := p.SeccompSource(kind)
		if err != nil {
			t.Fatal(err)
		}
		if src.Ref != ref || len(src.Data) == 0 {
			t.Fatalf("%s: source %q, %d bytes", kind, src.Ref, len(src.Data))
		}
		got, err := src.Policy()
		if err != nil {
			t.Fatal(err)
		}
		want, err := p.SeccompPolicy(kind)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: decoded source differs from the policy", kind)
		}
	}
	if src, _ := p.SeccompSource("python"); string(src.Data) != string(body) {
		t.Fatalf("file source %q", src.Data)
	}
}
