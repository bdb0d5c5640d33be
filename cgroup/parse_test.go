package cgroup

import (
	"strings"
	"testing"
)

const sampleMountinfo = `23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/uni\040fied rw,relatime - cgroup2 cgroup2 rw,nsdelegate
`

func TestParseMountinfo(t *testing.T) {
	ms, err := parseMountinfo(strings.NewReader(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("want 3 cgroup mounts, got %+v", ms)
	}
	cpu, ok := findV1Mount(ms, "cpuacct")
	if !ok || cpu.Point != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("cpuacct mount %+v", cpu)
	}
	if _, ok := findV1Mount(ms, "pids"); ok {
		t.Error("found a pids mount that is not there")
	}
	v2, ok := findV2Mount(ms, "")
	if !ok || v2.Point != "/sys/fs/cgroup/uni fied" || v2.Super[1] != "nsdelegate" {
		t.Errorf("cgroup2 mount %+v", v2)
	}
	if _, ok := findV2Mount(ms, "/sys/fs/cgroup"); ok {
		t.Error("found cgroup2 at /sys/fs/cgroup")
	}
	if _, err := parseMountinfo(strings.NewReader("garbage line\n")); err == nil {
		t.Error("want an error for a line without separator")
	}
}

func TestCgroupDir(t *testing.T) {
	m := mount{Root: "/docker/abc", Point: "/sys/fs/cgroup/memory"}
	for _, c := range []struct{ proc, want string }{
		{"/docker/abc", "/sys/fs/cgroup/memory"},
		{"/docker/abc/job", "/sys/fs/cgroup/memory/job"},
	} {
		got, err := cgroupDir(m, c.proc)
		if err != nil || got != c.want {
			t.Errorf("cgroupDir(%s) = %s, %v; want %s", c.proc, got, err, c.want)
		}
	}
	for _, bad := range []string{"/", "/docker", "/docker/abcd", "/other"} {
		if got, err := cgroupDir(m, bad); err == nil {
			t.Errorf("cgroupDir(%s) = %s: want an error (outside the mount)", bad, got)
		}
	}
}

func TestV2OwnDirSkipsSupervisorLeaf(t *testing.T) {
	m := mount{Root: "/", Point: "/sys/fs/cgroup"}
	for proc, want := range map[string]string{
		"/system.slice/pmjail.service":                   "/sys/fs/cgroup/system.slice/pmjail.service",
		"/system.slice/pmjail.service/pmjail-supervisor": "/sys/fs/cgroup/system.slice/pmjail.service",
		"/": "/sys/fs/cgroup",
	} {
		if got, err := v2OwnDir(m, proc); err != nil || got != want {
			t.Errorf("v2OwnDir(%s) = %s, %v; want %s", proc, got, err, want)
		}
	}
}

func TestJobNames(t *testing.T) {
	n, err := jobName(owner{4242, "98765"}, "run-1.a_b")
	if err != nil || n != "pmjail-4242-@98765-run-1.a_b" {
		t.Fatalf("jobName = %q, %v", n, err)
	}
	if o, id, ok := parseName(n); !ok || o != (owner{4242, "98765"}) || id != "run-1.a_b" {
		t.Errorf("parseName(%s) = %+v, %q, %v", n, o, id, ok)
	}
	// An earlier version's name, without the start, is still a job's
	// (Sweep removes it once its pid is gone), and what it made is read
	// as it was.
	old, err := jobName(owner{pid: 4242}, "9-x")
	if err != nil || old != "pmjail-4242-9-x" {
		t.Fatalf("jobName without a start = %q, %v", old, err)
	}
	if o, id, ok := parseName(old); !ok || o != (owner{pid: 4242}) || id != "9-x" {
		t.Errorf("parseName(%s) = %+v, %q, %v", old, o, id, ok)
	}
	if !Reserved("pmjail-4242-@98765-prestart-ab") || !Reserved("pmjail-4242-prestart-ab") || Reserved(n) {
		t.Error("Reserved: want the prestart names of both forms, and no job's")
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "é", "@1-a", strings.Repeat("a", 65)} {
		if _, err := jobName(owner{1, "2"}, bad); err == nil {
			t.Errorf("jobName(%q): want an error", bad)
		}
	}
	for _, name := range []string{leafName, "pmjail-", "pmjail-12", "pmjail-12-", "pmjail-x-1", "pmjail-0-a", "pmjail-012-a", "other-12-a", "pmjail--1-a",
		"pmjail-12-@", "pmjail-12-@-a", "pmjail-12-@5", "pmjail-12-@5-", "pmjail-12-@x5-a", "pmjail-12-@05-a"} {
		if o, ok := ownerOf(name); ok {
			t.Errorf("ownerOf(%q) = %+v: want no owner", name, o)
		}
	}
}

func TestParseFiles(t *testing.T) {
	kv, err := parseFlatKeyed("low 0\nhigh 3\nmax 7\noom 1\noom_kill 2\n")
	if err != nil || kv["max"] != 7 || kv["oom_kill"] != 2 || kv["low"] != 0 {
		t.Errorf("parseFlatKeyed = %v, %v", kv, err)
	}
	if _, err := parseFlatKeyed("a 1 2\n"); err == nil {
		t.Error("want an error for three fields")
	}
	if v, ok, err := parseSingle("123\n"); err != nil || !ok || v != 123 {
		t.Errorf("parseSingle = %d %v %v", v, ok, err)
	}
	if _, ok, err := parseSingle("max\n"); err != nil || ok {
		t.Errorf("parseSingle(max) ok=%v err=%v", ok, err)
	}
	if _, _, err := parseSingle("x"); err == nil {
		t.Error("parseSingle(x): want an error")
	}
	if p, err := parsePids("1\n22\n333\n"); err != nil || len(p) != 3 || p[2] != 333 {
		t.Errorf("parsePids = %v, %v", p, err)
	}
	if _, err := parsePids("1\n-2\n"); err == nil {
		t.Error("parsePids: want an error for -2")
	}
	if !containsLine("populated 1\nfrozen 1\n", "frozen 1") || containsLine("frozen 10\n", "frozen 1") {
		t.Error("containsLine")
	}
}

func TestReservedNames(t *testing.T) {
	for name, want := range map[string]bool{
		"pmjail-12-prestart-ab": true,
		"pmjail-12-ab":          false,
		"pmjail-12-xprestart-a": false,
		"pmjail-supervisor":     false,
		"other-12-prestart-ab":  false,
		"12-prestart-ab":        false,
		"pmjail-x-prestart-ab":  false, // no owner pid
		"pmjail-0-prestart-ab":  false,
	} {
		if got := Reserved(name); got != want {
			t.Errorf("Reserved(%q) = %v, want %v", name, got, want)
		}
	}
}
