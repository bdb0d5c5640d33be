package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/runtimes"
)

// --check-config answers for the config and starts nothing: a valid one
// is 0, an invalid one 1 with the field at fault named.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, cfg string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"version": 1, "metrics": {"listen": "127.0.0.1:9464"}, "max_concurrency": 2}`)
	bad := write("bad.json", `{"version": 1, "ceiling": {"limits": {"memory": "lots"}}}`)
	// A socket path no daemon could bind: nothing is bound to find out.
	sock := filepath.Join(dir, "no", "such", "dir", "pmjail.sock")
	if code := Main([]string{"--check-config", "--config", good, "--socket", sock}, "test"); code != 0 {
		t.Errorf("valid config: exit %d, want 0", code)
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Errorf("--check-config made the socket's directory: %v", err)
	}
	if code := Main([]string{"--check-config", "--config", bad}, "test"); code != exitInvalidConfig {
		t.Errorf("invalid config: exit %d, want %d", code, exitInvalidConfig)
	}
	if code := Main([]string{"--check-config", "--config", filepath.Join(dir, "absent.json")}, "test"); code != exitInvalidConfig {
		t.Errorf("missing config: exit %d, want %d", code, exitInvalidConfig)
	}
	// An empty path is not the default: `--config "$CFG"` with CFG unset
	// checked (and started) the defaults.
	for _, args := range [][]string{{"--config", ""}, {"--config", good, "--socket", ""}} {
		if code := Main(append([]string{"--check-config"}, args...), "test"); code != exitInvalidConfig {
			t.Errorf("%q: exit %d, want %d", args, code, exitInvalidConfig)
		}
	}
	if _, err := loadServeConfig(good, ""); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	_, err := loadServeConfig(bad, "")
	if code := checkConfig(&out, &errOut, err); code != exitInvalidConfig || out.Len() != 0 ||
		!strings.Contains(errOut.String(), "ceiling.limits.memory") || !strings.Contains(errOut.String(), bad) {
		t.Errorf("invalid config: exit %d, stdout %q, stderr %q; want %d, nothing, the file and field named",
			code, out.String(), errOut.String(), exitInvalidConfig)
	}
	out.Reset()
	errOut.Reset()
	_, err = loadServeConfig(good, "")
	if code := checkConfig(&out, &errOut, err); code != 0 || out.String() != "OK\n" || errOut.Len() != 0 {
		t.Errorf("valid config: exit %d, stdout %q, stderr %q; want 0, OK", code, out.String(), errOut.String())
	}
}

// --check-config refuses what the start would: a ceiling that names a
// package the store does not hold stops a start, so the check says so.
func TestCheckConfigPackages(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(packages.EnvDir, filepath.Join(dir, "store")) // empty
	if os.Getenv(runtimes.EnvRuntimeDir) == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(runtimes.EnvRuntimeDir, filepath.Join(wd, "..", "..", "node_modules"))
	}
	cfg := filepath.Join(dir, "pkgs.json")
	if err := os.WriteFile(cfg, []byte(`{"version": 1, "ceiling": {"packages": ["npm:zod@3.23.8"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	c, err := loadServeConfig(cfg, "")
	if err == nil {
		err = checkHost(c, cfg)
	}
	if code := checkConfig(&out, &errOut, err); code != exitInvalidConfig || out.Len() != 0 ||
		!strings.Contains(errOut.String(), "ceiling.packages[0]") || !strings.Contains(errOut.String(), cfg) {
		t.Errorf("a package not in the store: exit %d, stdout %q, stderr %q; want %d, the file and field named",
			code, out.String(), errOut.String(), exitInvalidConfig)
	}
}
