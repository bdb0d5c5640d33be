//go:build cgo

package seccomp_test

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/seccomp"
	"github.com/pmjail/pmjail/seccomp/bpf"
)

// archDangerous are the dangerous-call probes only amd64 has
// (probe_linux_amd64_test.go), with the answer every filter must give.
var archDangerous = map[string]map[string]string{
	"amd64": {"iopl": "EPERM", "x32_getpid": "EPERM", "i386_getpid": "EPERM"},
}[runtime.GOARCH]

func init() { maps.Copy(dangerousProbes, archDangerous) }

var dangerousProbes = map[string]string{
	"ptrace_traceme":       "EPERM",
	"mount":                "EPERM",
	"umount2":              "EPERM",
	"unshare_newns":        "EPERM",
	"setns":                "EPERM",
	"clone_newuser":        "EPERM",
	"clone_newnet":         "EPERM",
	"keyctl":               "EPERM",
	"add_key":              "EPERM",
	"bpf":                  "EPERM",
	"perf_event_open":      "EPERM",
	"userfaultfd":          "EPERM",
	"io_uring_setup":       "EPERM",
	"personality_linux32":  "EPERM",
	"ioctl_tiocsti":        "EPERM",
	"ioctl_tiocsti_hibits": "EPERM",
	"ioctl_tioclinux":      "EPERM",
	// Allowed neighbours: the filter must not break ordinary use.
	"clone_plain":    "ok",
	"clone3":         "ENOSYS",
	"ioctl_tcgets":   "ENOTTY",
	"ioctl_fionread": "ok",
	"getppid":        "ok",
}

func TestDangerousCallsDenied(t *testing.T) {
	testenv.RequireRoot(t)
	prog := compile(t, probeProfile(t), seccomp.Options{})
	got, _ := runProbes(t, prog, slices.Sorted(maps.Keys(dangerousProbes))...)
	for name, want := range dangerousProbes {
		if got[name] != want {
			t.Errorf("%s: got %q, want %q", name, got[name], want)
		}
	}
}

func TestNotifyNamesDenials(t *testing.T) {
	testenv.RequireRoot(t)
	prog := compile(t, probeProfile(t), seccomp.Options{Notify: true})
	got, counts := runProbes(t, prog, slices.Sorted(maps.Keys(dangerousProbes))...)
	for name, want := range dangerousProbes {
		if got[name] != want {
			t.Errorf("%s: got %q, want %q (answered by the supervisor)", name, got[name], want)
		}
	}
	want := map[string]uint64{
		"ptrace": 1, "mount": 1, "umount2": 1, "unshare": 1, "setns": 1, "clone": 2,
		"keyctl": 1, "add_key": 1, "bpf": 1, "perf_event_open": 1, "userfaultfd": 1,
		"io_uring_setup": 1, "personality": 1, "ioctl": 3,
	}
	if _, ok := archDangerous["iopl"]; ok {
		want["iopl"] = 1
	}
	t.Logf("denials: %v", counts)
	for name, n := range want {
		if counts[name] != n {
			t.Errorf("denials[%q] = %d, want %d (all: %v)", name, counts[name], n, counts)
		}
	}
}

func TestProfileCannotAllowDangerous(t *testing.T) {
	testenv.RequireRoot(t)
	// The profile allows ptrace and personality; only the operator can.
	p := probeProfile(t, "ptrace", "personality", "mount")
	got, _ := runProbes(t, compile(t, p, seccomp.Options{}), "ptrace_attach", "personality_linux32", "personality_query", "mount")
	for name, want := range map[string]string{"ptrace_attach": "EPERM", "personality_linux32": "EPERM", "personality_query": "ok", "mount": "EPERM"} {
		if got[name] != want {
			t.Errorf("profile-allowed %s: got %q, want %q", name, got[name], want)
		}
	}
	// With the operator's consent the calls reach the kernel: ESRCH for a
	// pid that cannot exist, ENOENT for the missing mount point.
	got, _ = runProbes(t, compile(t, p, seccomp.Options{AllowDangerous: []string{"ptrace", "mount"}}), "ptrace_attach", "mount", "bpf")
	for name, want := range map[string]string{"ptrace_attach": "ESRCH", "mount": "ENOENT", "bpf": "EPERM"} {
		if got[name] != want {
			t.Errorf("operator-allowed %s: got %q, want %q", name, got[name], want)
		}
	}
}

func TestLogModeLetsCallsThrough(t *testing.T) {
	testenv.RequireRoot(t)
	if (seccomp.Options{}).Log {
		t.Fatal("log mode is on by default")
	}
	// getsid is not in the deno profile, and harmless.
	got, _ := runProbes(t, compile(t, probeProfile(t), seccomp.Options{}), "getsid")
	if got["getsid"] != "EPERM" {
		t.Fatalf("getsid under the deno profile: got %q, want EPERM", got["getsid"])
	}
	got, _ = runProbes(t, compile(t, probeProfile(t), seccomp.Options{Log: true}), "getsid", "mount", "ptrace_traceme", "ioctl_tiocsti")
	for name, want := range map[string]string{"getsid": "ok", "mount": "EPERM", "ptrace_traceme": "EPERM", "ioctl_tiocsti": "EPERM"} {
		if got[name] != want {
			t.Errorf("log mode %s: got %q, want %q", name, got[name], want)
		}
	}
}

func TestCompileBuiltins(t *testing.T) {
	for _, name := range profiles.SeccompNames() {
		for _, opt := range []seccomp.Options{{}, {Notify: true}, {Log: true}, {AllowDangerous: seccomp.DangerousSyscalls()}} {
			prog := compile(t, builtin(t, name), opt)
			b, err := prog.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var back bpf.Program
			if err := back.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			// The errno is the supervisor's: it is not sent to the child.
			if back.Errno != 0 {
				t.Fatalf("%s %+v: the errno crossed to the child (%v)", name, opt, back.Errno)
			}
			want := *prog
			want.Errno = 0
			if !reflect.DeepEqual(&back, &want) {
				t.Fatalf("%s %+v: program changed in a binary round trip", name, opt)
			}
			if _, err := json.Marshal(prog); err != nil {
				t.Fatalf("%s: JSON: %v", name, err)
			}
		}
	}
	if len(profiles.SeccompNames()) < 3 {
		t.Fatalf("built-in profiles: %v", profiles.SeccompNames())
	}
}

func TestCompileRefuses(t *testing.T) {
	p := builtin(t, "deno")
	for _, tc := range []struct {
		name string
		p    *specs.LinuxSeccomp
		opt  seccomp.Options
		want string
	}{
		{"nil", nil, seccomp.Options{}, "no profile"},
		{"log+notify", p, seccomp.Options{Log: true, Notify: true}, "exclude each other"},
		{"allow unknown", p, seccomp.Options{AllowDangerous: []string{"read"}}, `"read" is not one of the dangerous`},
		{"bad action", &specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_FOO"}, seccomp.Options{}, "defaultAction"},
		// The same words as profiles.ValidateSeccomp: one table says what compiles.
		{"trace", &specs.LinuxSeccomp{DefaultAction: specs.ActTrace}, seccomp.Options{}, `defaultAction: action "SCMP_ACT_TRACE" not supported`},
		{"bad name", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"nosuchcall"}, Action: specs.ActAllow}}}, seccomp.Options{}, `syscalls[0].names[0]: unknown syscall "nosuchcall"`},
		{"i386", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Architectures: []specs.Arch{specs.ArchX86}}, seccomp.Options{}, "architectures[0]"},
	} {
		_, err := seccomp.Compile(tc.p, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestUnmarshalRefusesGarbage(t *testing.T) {
	prog := compile(t, builtin(t, "native"), seccomp.Options{})
	b, _ := prog.MarshalBinary()
	for _, bad := range [][]byte{nil, []byte("PMJSECC2"), b[:len(b)-3], append([]byte("XXXXXXXX"), b[8:]...)} {
		var p bpf.Program
		if err := p.UnmarshalBinary(bad); err == nil {
			t.Errorf("accepted %d bytes of garbage", len(bad))
		}
	}
}

func TestServeStopsWithContext(t *testing.T) {
	testenv.RequireRoot(t)
	prog := compile(t, builtin(t, "native"), seccomp.Options{Notify: true})
	c := startChild(t, testContext(t), "exec", prog, nil, "/bin/sleep", "30")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *seccomp.Denials)
	go func() { done <- seccomp.Serve(ctx, c.listener) }()
	select {
	case <-done:
		t.Fatal("Serve returned while the filtered child still runs")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

// A denial is never answered with success, whatever errno a caller passes:
// an answer of 0 would tell the guest that a call which never ran worked.
func TestNotifyNeverAnswersSuccess(t *testing.T) {
	testenv.RequireRoot(t)
	prog := compile(t, probeProfile(t), seccomp.Options{Notify: true})
	ctx := testContext(t)
	c := startChild(t, ctx, "probe", prog, nil, "mount", "bpf")
	var d seccomp.Denials
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, c.listener, 0) }()
	got := c.wait(t)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mount", "bpf"} {
		if got[name] != "EPERM" {
			t.Errorf("%s answered with errno 0 asked: got %q, want EPERM", name, got[name])
		}
	}
}
