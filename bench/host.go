package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// hostFacts are the machine and software versions the numbers belong to.
func (b *Bench) hostFacts() [][]string {
	rows := [][]string{
		{"CPU", cpuModel()},
		{"cores (nproc)", fmt.Sprint(runtime.NumCPU())},
		{"memory", memTotal()},
		{"kernel", firstLine(output("uname", "-sr"))},
		{"cgroups", cgroupMode()},
		{"Deno", firstLine(output(b.Deno, "--version"))},
		{"Pyodide", pyodideVersion(b.PyodideDir)},
		{"Go", firstLine(output("go", "version"))},
		{"bubblewrap", firstLine(output("bwrap", "--version"))},
		{"pmjail", firstLine(output(b.Pmjail, "version"))},
		{"pmjail init stage", initStageLine(output(b.Pmjail, "version"))},
		{"pmjail git revision", gitRevision(b.Root)},
	}
	return rows
}

// initStageLine is what `pmjail version` says of the init stage's binary.
func initStageLine(version string) string {
	for _, l := range strings.Split(version, "\n") {
		if v, ok := strings.CutPrefix(l, "init stage: "); ok {
			return v
		}
	}
	return "unknown"
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			var kb int64
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

// cgroupMode says which hierarchy the job cgroups land in: it changes
// where a jail's time goes (a v1 move can wait for an RCU grace period).
func cgroupMode() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "v2 (unified)"
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		return "v1 controllers (legacy/hybrid)"
	}
	return "unknown"
}

func pyodideVersion(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "unknown"
	}
	var pkg struct{ Version string }
	if json.Unmarshal(data, &pkg) != nil {
		return "unknown"
	}
	return pkg.Version
}

// gitRevision is the checkout's commit, marked when the tree has changes
// that the numbers include.
func gitRevision(root string) string {
	rev := firstLine(output("git", "-C", root, "rev-parse", "--short", "HEAD"))
	if rev == "" {
		return "unknown (not a git checkout)"
	}
	if strings.TrimSpace(output("git", "-C", root, "status", "--porcelain", "--untracked-files=no")) != "" {
		rev += " + uncommitted changes"
	}
	return rev
}

// output runs a command and returns its stdout, or "" when it fails.
func output(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
