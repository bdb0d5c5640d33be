// Package proctest is what tests read of their own process to prove a
// run left nothing behind: its unreaped children and its open files.
package proctest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Children lists this process's unreaped children, without reaping any.
func Children(t testing.TB) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread is gone
		}
		pids = append(pids, strings.Fields(string(b))...)
	}
	return pids
}

// FDTargets maps this process's open fds to what they refer to.
func FDTargets(t testing.TB) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	listing := "/proc/" + strconv.Itoa(os.Getpid()) + "/fd" // ReadDir's own
	targets := map[string]string{}
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target != listing {
			targets[e.Name()] = target
		}
	}
	return targets
}
