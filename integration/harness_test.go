package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
)

// pmjail is the path of the binary under test.
var pmjail string

// repoRoot is the checkout the tests run from.
var repoRoot string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	if dir := os.Getenv("PMJAIL_REPO_ROOT"); dir != "" {
		repoRoot = dir // a test binary run elsewhere, as in the VM
	}
	if os.Getenv("PMJAIL_RUNTIME_DIR") == "" {
		os.Setenv("PMJAIL_RUNTIME_DIR", filepath.Join(repoRoot, "node_modules"))
	}
	pmjail = os.Getenv("PMJAIL_BIN")
	if pmjail == "" {
		dir, err := os.MkdirTemp("", "itest-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		// The jail binds the binary into itself as an unprivileged host
		// id: the directory must be searchable by others.
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pmjail = filepath.Join(dir, "pmjail")
		if err := buildPair(repoRoot, pmjail); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration: these tests need root (they create namespaces and cgroups)")
		if testenv.CI() {
			return 1
		}
	}
	return m.Run()
}

// Result mirrors the result object of the contract, as the tests read it.
type Result struct {
	ID       string          `json:"id"`
	Status   string          `json:"status"`
	ExitCode int             `json:"exit_code"`
	Signal   string          `json:"signal"`
	Value    json.RawMessage `json:"value"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Stack   string `json:"stack"`
	} `json:"error"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated struct {
		Stdout bool `json:"stdout"`
		Stderr bool `json:"stderr"`
	} `json:"truncated"`
	Logs []struct {
		Level   string          `json:"level"`
		Message string          `json:"message"`
		Meta    json.RawMessage `json:"meta"`
	} `json:"logs"`
	LimitsHit []string          `json:"limits_hit"`
	Denied    map[string]uint64 `json:"denied_syscalls"`
	Usage     struct {
		WallMS          int64  `json:"wall_ms"`
		CPUMS           int64  `json:"cpu_ms"`
		PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
		PeakTasks       uint64 `json:"peak_tasks"`
		BrokerCalls     int    `json:"broker_calls"`
	} `json:"usage"`
	Posture json.RawMessage `json:"posture"`
}

// Invocation is one run of the binary.
type Invocation struct {
	ExitCode int
	Stdout   string
	Stderr   string
	Result   *Result // set when --json output parsed
}

// pmjailCmd runs the binary with args and optional stdin, with a deadline.
func pmjailCmd(t *testing.T, stdin string, args ...string) Invocation {
	t.Helper()
	// Past the longest wall limit a test gives a run (room).
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// Under TestMutation_SecurityLayers, the harness removes one layer
	// (mutation_test.go); otherwise this is pmjail with args.
	path, argv, env := weakened(t, args)
	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.Env = env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	inv := Invocation{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		inv.ExitCode = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run pmjail %v: %v", args, err)
	}
	for _, a := range args {
		if a == "--json" {
			var r Result
			if err := json.Unmarshal(out.Bytes(), &r); err == nil {
				inv.Result = &r
			}
		}
	}
	return inv
}

// room gives a run that tests some other limit CPU and wall time to spare.
// A fraction of a second of a guest's CPU natively is tens of times that
// under the VM suite's emulated CPU, whose clock also runs on while QEMU
// waits for a host core: past the default profile's CPU limit on a slower
// or busier host, where the run would end cpu_limit instead of by the
// limit the test is of.
var room = []string{"--cpu-time", "120s", "--timeout", "300s"}

// runScript writes source to a file named name in a fresh directory and
// runs it with `pmjail run --json [flags] FILE`, returning the parsed result.
func runScript(t *testing.T, name, source string, flags ...string) *Result {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--json"}, flags...)
	args = append(args, path)
	inv := pmjailCmd(t, "", args...)
	if inv.Result == nil {
		t.Fatalf("pmjail %v: no result (exit %d)\nstdout: %s\nstderr: %s", args, inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	return inv.Result
}

// buildPair builds pmjail at path with the daemon, pmjail-serve, beside it
// and its build ID recorded, as `make build` does (without pmjail-init:
// pmjail is then its own init stage).
func buildPair(repoRoot, path string) error {
	serve := filepath.Join(filepath.Dir(path), "pmjail-serve")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = repoRoot
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("go", "build", "-o", serve, "./cmd/pmjail-serve"); err != nil {
		return err
	}
	id, err := run("go", "tool", "buildid", serve)
	if err != nil {
		return err
	}
	_, err = run("go", "build", "-tags", "nodaemon", "-ldflags=-X main.serveBuildID="+id, "-o", path, "./cmd/pmjail")
	return err
}
