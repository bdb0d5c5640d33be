package integration

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// securityMutations pairs each security test with the layer it guards.
// TestMutation_SecurityLayers runs the test again with that layer removed
// (weakened says how) and requires it to fail, saying fails: a test that
// still passes without its layer proves nothing about it. (The suite's
// own run of the test, with every layer, is the control.) A test whose
// layer no job data or outer restriction can remove says why instead.
var securityMutations = []struct {
	test, layer, fails, why string
}{
	{test: "TestSecurityKernel_ProberSyscalls", layer: layerSeccomp, fails: "does not name ptrace"},
	{test: "TestSecurityKernel_ProberSyscalls", layer: layerSeccompPolicy, fails: "does not name acct"},
	{test: "TestSecurityKernel_CloneNamespaces", layer: layerSeccomp, fails: "clone_newuser"},
	{test: "TestSecurityKernel_Landlock", layer: layerLandlock, fails: "not applied in the run"},
	{test: "TestSecurityKernel_Posture", layer: layerNetworkNamespace, fails: "want only lo"},
	{test: "TestSecurityFilesystem_JSAllowAll", layer: layerRoot, fails: "probe read_passwd"},
	{test: "TestSecurityFilesystem_StaticImport", layer: layerRoot, fails: "host-only"},
	{test: "TestSecurityFilesystem_JSRun", layer: layerDenoPermissions, fails: "probe read_passwd"},
	{test: "TestSecurityProcess_WorkerMorePermissions", layer: layerDenoPermissions, fails: "granted"},
	{test: "TestSecurityProcess_Signals", why: "pmjail refuses to build a jail without a pid namespace (fail closed), so no run lacks it"},
	{test: "TestSecurityLeaks_OtherJobs", why: "no run lacks a pid namespace (see Signals), and no job data shares a /tmp: " +
		"binding another job's /proc/PID/root/tmp is refused as a bind source the jail's unprivileged ids cannot open"},
	{test: "TestSecurityFilesystem_Python", why: "the Pyodide loader's Deno permissions are fixed by runtimes/, not by a profile or " +
		"job, and `pmjail run` binds nothing a job names"},
	{test: "TestSecurityBroker_Requests", layer: layerCapabilities, fails: "want code denied"},

	// The trust-boundary tests (docs/security.md). Each was seen failing
	// on the code before its fix; those whose layer is policy data are
	// also run without it here.
	{test: "TestTrust_SocketFamilies", layer: layerSeccompPolicy, fails: "ok=true"},
	{test: "TestTrust_PrctlOptions", layer: layerSeccompPolicy, fails: "probe prctl_pdeathsig_clear: ok=true"},
	{test: "TestTrust_LifetimePid1RlimitsOutOfReach", layer: layerSeccompPolicy, fails: "probe prlimit=1: ok=true"},
	{test: "TestTrust_LifetimeExecGuestDiesWithCLI", why: "it removes each of its two layers itself: a policy allowing prctl " +
		"leaves only the job's pid 1, whose parent-death signal no job data can clear"},
	{test: "TestTrust_LifetimeDaemonGuestDiesWithDaemon", why: "the daemon's jobs come over its socket, which a mutant pmjail " +
		"command line cannot reach; the pid 1 it guards is tried alone by LifetimeExecGuestDiesWithCLI"},
	{test: "TestTrust_LifetimeSignalsToPid1", why: "pid 1's handling of signals is the init stage's code, not job data"},
	{test: "TestTrust_GuestCannotForgeLimitStatus", why: "which end is a limit's is the supervisor's reading of the run, code, not job data"},
	{test: "TestTrust_LifetimePid1HoldsNothing", why: "pid 1's capabilities are the init stage's code, not job data"},
	{test: "TestTrust_LifetimeGuestKeepsItsCPUs", why: "the CPUs the guest may use are the init stage's code (its threads pinned only while their capabilities drop), not job data"},
	{test: "TestTrust_LifetimeKillAtAnyMoment", why: "no job data keeps a job alive past its supervisor (see LifetimeExecGuestDiesWithCLI)"},
	{test: "TestTrust_LifetimeDaemonKillAtAnyMoment", why: "as LifetimeKillAtAnyMoment, through the daemon's socket"},
	{test: "TestTrust_LeaseUnprivilegedCannotBlock", why: "the lease directory is fixed by pmjail, not chosen by a job"},
	{test: "TestTrust_InotifyFloodSparesHostRoot", why: "the user namespace's owner is set by the supervisor, not by job data"},
	{test: "TestTrust_PipeBudgetPerJob", why: "each job's host uid is its lease's, set by the supervisor, not by job data " +
		"(seen failing with every job's guest given one host uid)"},
	{test: "TestTrust_PipeBudgetSupervisorPipes", why: "the uid the output pipes are charged to is the supervisor's, " +
		"set when it makes them, not by job data (seen failing with them made as root)"},
	{test: "TestTrust_GuestPriorityNotInherited", why: "the guest's nice value and oom_score_adj are the init stage's code, not job data"},
	{test: "TestTrust_GuestOOMProtectionNotInherited", why: "as GuestPriorityNotInherited: the guest's oom_score_adj is the init stage's code, not job data"},
	{test: "TestTrust_GuestNiceLimitNotInherited", why: "as GuestPriorityNotInherited: the guest's RLIMIT_NICE is the init stage's code, not job data"},
	{test: "TestTrust_DevicesReadOnly", why: "the devices' mounts are the jail's own, not job data: exec refuses a bind over a device"},
	{test: "TestTrust_DenialFloodSupervisorCPU", why: "the notification budget is the supervisor's, not the policy's or the job's"},
	{test: "TestTrust_RuntimesUnderFilteredPolicies", why: "not an attack: the built-in runtimes must run under the filtered policies"},
	{test: "TestTrust_ExecBindRefusesUnixSockets", why: "the refusal happens when the job is resolved, before any layer of the jail"},
	{test: "TestTrust_DenoImportPermissionDenied", layer: layerDenoPermissions, fails: "want denied for every host"},
	{test: "TestTrust_StrictTimingHoldsOrSaysDegraded", why: "it checks what the posture says against what the guest measures, both ways"},
	{test: "TestTrust_PostureLandlockFromProbeJail", why: "it removes Landlock itself, from a thread that already holds every Landlock layer"},
	{test: "TestTrust_SecretBoundToOrigins", why: "the daemon's ceiling is the operator's config, checked at resolve and in the broker"},
	{test: "TestTrust_PrivateLiteralRefused", why: "the daemon's ceiling is the operator's config, checked at resolve and in the broker"},
	{test: "TestTrust_MethodOverrideDenied", why: "the broker's header rules are code, not data a job or profile sets"},
	{test: "TestTrust_GuestHeadersFiltered", why: "the broker's header rules are code, not data a job or profile sets"},
	{test: "TestTrust_DaemonMemoryBudget", why: "the reply budget and the streamed result are the daemon's, not a job's"},
	{test: "TestTrust_OversizedCallSkipped", why: "the frame cap is the broker's; a job cannot lift it"},
	{test: "TestTrust_PostureRefreshHangupKeepsLayers", why: "the daemon's probe rules are code, not data"},
	{test: "TestTrust_PostureRefreshSingleFlight", why: "the daemon's probe rules are code, not data"},
	{test: "TestTrust_PostureRefreshOtherUID", why: "the daemon's probe rules are code, not data"},
	{test: "TestTrust_PostureRefreshPeerHelper", why: "not a test: the other uid's side of PostureRefreshOtherUID"},
}

// The layers weakened can remove, by the name of their posture layer
// where there is one.
const (
	layerSeccomp          = "seccomp"           // an outer filter fails every filter's installation
	layerSeccompPolicy    = "seccomp_policy"    // a profile whose policy allows everything (pmjail's dangerous set stays)
	layerNetworkNamespace = "network_namespace" // an outer filter refuses CLONE_NEWNET
	layerLandlock         = "landlock"          // a profile with "landlock": false
	layerRoot             = "root"              // exec binds the host's /etc and /var/tmp
	layerDenoPermissions  = "deno_permissions"  // `run` becomes exec of `deno run -A` in the same jail
	layerCapabilities     = "capabilities"      // the job declares what the guest asks the broker for
)

// weakenEnv names the layer a mutant run of the suite removes.
const weakenEnv = "PMJAIL_TEST_WEAKEN"

func weakenedLayer() string { return os.Getenv(weakenEnv) }

func TestMutation_SecurityLayers(t *testing.T) {
	if weakenedLayer() != "" {
		t.Skipf("a mutant run (%s=%s) does not mutate again", weakenEnv, weakenedLayer())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lister := exec.Command(self, "-test.list", "^(TestSecurity|TestTrust)")
	lister.Env = append(os.Environ(), "PMJAIL_BIN="+pmjail) // no second build of pmjail to list tests
	list, err := lister.Output()
	if err != nil {
		t.Fatalf("list the security tests: %v", err)
	}
	var listed []string
	for _, m := range securityMutations {
		listed = append(listed, m.test)
	}
	for _, name := range strings.Fields(string(list)) {
		if !slices.Contains(listed, name) {
			t.Errorf("%s has no row in securityMutations: name the layer it guards", name)
		}
	}
	prober := buildProber(t)
	for _, m := range securityMutations {
		if m.layer == "" {
			t.Logf("%s: not mutated: %s", m.test, m.why)
			continue
		}
		t.Run(m.test+"_without_"+m.layer, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, self, "-test.run", "^"+m.test+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), weakenEnv+"="+m.layer, "PMJAIL_BIN="+pmjail, "PMJAIL_PROBER="+prober)
			out, err := cmd.CombinedOutput()
			if _, failed := errors.AsType[*exec.ExitError](err); !failed {
				t.Fatalf("%s passed with %s removed (err %v):\n%s", m.test, m.layer, err, out)
			}
			if !strings.Contains(string(out), "--- FAIL: "+m.test) || !strings.Contains(string(out), m.fails) {
				t.Fatalf("%s without %s: want it to fail saying %q:\n%s", m.test, m.layer, m.fails, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, m.fails) {
					t.Logf("seen failing without %s: %s", m.layer, strings.TrimSpace(line))
					break
				}
			}
		})
	}
}

// weakened is the command pmjailCmd runs for pmjail args: pmjail itself,
// unless this is a mutant run (weakenEnv) of a run or exec, which it
// changes to remove the layer through data the jail reads or a real outer
// restriction, never a switch in pmjail. env nil means the test's own.
func weakened(t *testing.T, args []string) (path string, argv, env []string) {
	t.Helper()
	layer := weakenedLayer()
	if layer == "" || len(args) == 0 || (args[0] != "run" && args[0] != "exec") {
		return pmjail, args, nil
	}
	// A guest freed of a layer may wedge itself (PTRACE_TRACEME with no
	// tracer stops it at its next signal): a mutant run need not wait out
	// the profile's timeout to fail. A --timeout of the test's own wins.
	args = slices.Insert(slices.Clone(args), 1, "--timeout", "3s")
	switch layer {
	case layerSeccomp, layerNetworkNamespace:
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		return self, nil, append(os.Environ(), outerDenyEnv+"="+layer,
			"PMJAIL_BIN_UNDER_TEST="+pmjail, "PMJAIL_TEST_ARGS="+strings.Join(args, "\x1f"))
	case layerSeccompPolicy:
		dir := t.TempDir()
		policy := filepath.Join(dir, "allow-all.json")
		writeFile(t, policy, `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],"syscalls":[]}`)
		return pmjail, withProfile(t, args, `{"deno":`+jsString(policy)+`,"python":`+jsString(policy)+`,"native":`+jsString(policy)+`}`, true), nil
	case layerLandlock:
		return pmjail, withProfile(t, args, `{"deno":"deno","python":"pyodide","native":"native"}`, false), nil
	case layerRoot:
		if args[0] == "exec" {
			return pmjail, slices.Insert(args, 1, "--ro-bind", "/etc", "--ro-bind", "/var/tmp"), nil
		}
	case layerDenoPermissions:
		if args[0] == "run" {
			return pmjail, denoAllowAll(t, args), nil
		}
	case layerCapabilities:
		// The test declares the capabilities itself (capsFor).
	default:
		t.Fatalf("%s=%q: no such layer", weakenEnv, layer)
	}
	return pmjail, args, nil
}

// withProfile inserts into args a --profile of the default limits with
// the given seccomp policies and Landlock setting, right after the
// command, so that a --profile of the test's own wins.
func withProfile(t *testing.T, args []string, seccomp string, landlock bool) []string {
	t.Helper()
	profile := filepath.Join(t.TempDir(), "weakened.json")
	writeFile(t, profile, `{"name":"weakened","limits":{"memory":"256M","cpu_time":"10s","timeout":"30s","pids":32,"output":"1M","tmp":"16M"},`+
		`"seccomp":`+seccomp+`,"landlock":`+strconv.FormatBool(landlock)+`}`)
	return slices.Insert(args, 1, "--profile", profile)
}

// capsFor is the capability that lets the guest send method to rawURL:
// the broker's check removed by declaring what is asked.
func capsFor(t *testing.T, rawURL, method string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return "request=" + u.Scheme + "://" + u.Host + ":" + method
}

// denoAllowAll turns `run [flags] FILE` into the same program run by
// `deno run -A` under `pmjail exec`: the same jail without Deno's
// permission layer. Flags only `run` takes (capabilities, input, runtime)
// have no place there.
func denoAllowAll(t *testing.T, args []string) []string {
	t.Helper()
	file := args[len(args)-1]
	out := []string{"exec"}
	for i := 1; i < len(args)-1; i++ {
		name, _, inline := strings.Cut(args[i], "=")
		switch name {
		case "--cap", "--input", "--runtime":
			if !inline {
				i++
			}
		default:
			out = append(out, args[i])
		}
	}
	dir := outsideTmpDir(t, "itest-weak-")
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, filepath.Base(file)), string(src))
	return append(out, "--ro-bind", dir+":/job", "--", denoBin(t), "run", "-A", "--no-config", "/job/"+filepath.Base(file))
}

// outerDenyEnv makes this test binary, re-executed, install a seccomp
// filter that takes one layer away from the host and then exec pmjail
// (PMJAIL_BIN_UNDER_TEST with PMJAIL_TEST_ARGS): the layer is then truly
// missing, as on a host without it, and pmjail's own probes find so.
const outerDenyEnv = "PMJAIL_TEST_OUTER_DENY"

func init() {
	layer := os.Getenv(outerDenyEnv)
	if layer == "" {
		return
	}
	if err := denyLayer(layer); err != nil {
		os.Stderr.WriteString("outer filter: " + err.Error() + "\n")
		os.Exit(99)
	}
	args := strings.Split(os.Getenv("PMJAIL_TEST_ARGS"), "\x1f")
	err := syscall.Exec(os.Getenv("PMJAIL_BIN_UNDER_TEST"), append([]string{"pmjail"}, args...), os.Environ())
	os.Stderr.WriteString("exec pmjail: " + err.Error() + "\n")
	os.Exit(98)
}
