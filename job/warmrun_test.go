package job

import (
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/runtimes"
)

// warmKeyJob is a run's jail as warmTemplate sees it, with limits of the
// job's own.
func warmKeyJob(memory int64, cpuSeconds uint64, heapMB string) *jail.Job {
	return &jail.Job{
		Spec: &specs.Spec{
			Process: &specs.Process{
				Args:    []string{"deno", "run", "--v8-flags=--max-old-space-size=" + heapMB + ",--stack-size=900", "/pmjail/bootstrap.js"},
				Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}, {Type: "RLIMIT_CPU", Hard: cpuSeconds, Soft: cpuSeconds}},
			},
			Mounts: []specs.Mount{{Destination: "/tmp", Type: "tmpfs", Options: []string{"size=64m"}}},
			Linux: &specs.Linux{
				Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}},
				Resources:  &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &memory}},
			},
		},
		Files:    []runtimes.File{{Path: runtimes.JobDir + "/main.js", Mode: 0o444, Data: []byte("console.log(1)")}, {Path: "/pmjail/bootstrap.js", Mode: 0o444}},
		Seccomp:  []byte{1, 2, 3, 4},
		Landlock: true,
	}
}

// TestWarmKeyLeavesOutTheJobsOwn: jobs that differ only in what a warm
// runtime does not hold (limits, RLIMIT_CPU, the V8 heap cap, the job's
// files) share a template; any difference in the jail itself (a flag, a
// mount, an rlimit, the seccomp filter, Landlock) is a template of its
// own. The template is made only for a key the pool does not know, and
// shares nothing with the job's spec.
func TestWarmKeyLeavesOutTheJobsOwn(t *testing.T) {
	never := func(string) bool { return false }
	base := warmKeyJob(64<<20, 2, "64")
	tmpl, key, err := warmTemplate(base, never)
	if err != nil {
		t.Fatal(err)
	}
	other := warmKeyJob(512<<20, 30, "512")
	other.Files[0].Data = []byte("while (true) {}")
	if _, k, err := warmTemplate(other, never); err != nil || k != key {
		t.Errorf("limits, heap cap and files changed the key (%v)", err)
	}
	changes := map[string]func(j *jail.Job){
		"a V8 flag":       func(j *jail.Job) { j.Spec.Process.Args[2] += ",--jitless" },
		"a mount":         func(j *jail.Job) { j.Spec.Mounts[0].Options[0] = "size=65m" },
		"an rlimit":       func(j *jail.Job) { j.Spec.Process.Rlimits[0].Soft = 512 },
		"a namespace":     func(j *jail.Job) { j.Spec.Linux.Namespaces = j.Spec.Linux.Namespaces[:1] },
		"the filter":      func(j *jail.Job) { j.Seccomp = []byte{1, 2, 3, 5} },
		"Landlock":        func(j *jail.Job) { j.Landlock = false },
		"a runtime file":  func(j *jail.Job) { j.Files[1].Mode = 0o555 },
		"the environment": func(j *jail.Job) { j.Spec.Process.Env = []string{"A=1"} },
	}
	for what, change := range changes {
		j := warmKeyJob(64<<20, 2, "64")
		change(j)
		if _, k, err := warmTemplate(j, never); err != nil || k == key {
			t.Errorf("%s changed, the key did not (%v)", what, err)
		}
	}

	if tmpl == nil || tmpl.Spec == base.Spec || tmpl.Spec.Process == base.Spec.Process || tmpl.Spec.Linux == base.Spec.Linux {
		t.Fatalf("the template shares the job's spec")
	}
	base.Spec.Mounts[0].Options[0] = "size=1m"
	base.Spec.Process.Rlimits[0].Soft = 1
	if tmpl.Spec.Mounts[0].Options[0] != "size=64m" || tmpl.Spec.Process.Rlimits[0].Soft != 1024 {
		t.Errorf("a change to the job's spec reached the template")
	}
	if tmpl.Spec.Linux.Resources.Memory != nil || len(tmpl.Spec.Process.Rlimits) != 1 || tmpl.Spec.Process.Args[2] != "--v8-flags=--stack-size=900" {
		t.Errorf("the template holds the job's limits: %+v, %v, %v", tmpl.Spec.Linux.Resources, tmpl.Spec.Process.Rlimits, tmpl.Spec.Process.Args)
	}
	if len(tmpl.Files) != 2 || tmpl.Files[0].Path != runtimes.JobDir || tmpl.Files[0].Mode != os.ModeDir|0o755 {
		t.Errorf("the template's files: %+v", tmpl.Files)
	}
	known := func(k string) bool { return k == key }
	if tmpl, k, err := warmTemplate(warmKeyJob(64<<20, 2, "64"), known); err != nil || k != key || tmpl != nil {
		t.Errorf("a known key: template %v, key %v, %v", tmpl, k == key, err)
	}
}

// BenchmarkWarmKey is a warm run's key of a template the pool knows: a
// job-sized spec (a dozen mounts, a 16 KiB filter).
func BenchmarkWarmKey(b *testing.B) {
	j := warmKeyJob(64<<20, 2, "64")
	for i := range 12 {
		j.Spec.Mounts = append(j.Spec.Mounts, specs.Mount{Destination: "/lib" + string(rune('a'+i)), Source: "/usr/lib/x86_64-linux-gnu", Type: "bind", Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	j.Seccomp = make([]byte, 16<<10)
	known := func(string) bool { return true }
	for b.Loop() {
		if _, _, err := warmTemplate(j, known); err != nil {
			b.Fatal(err)
		}
	}
}
