package initstage

import (
	"errors"
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// TestMountOptions: an OCI mount's options become exactly the flags they
// name and the file system's own data; bind and rbind are how the mount is
// made, not flags of the remount that follows.
func TestMountOptions(t *testing.T) {
	for _, c := range []struct {
		opts  []string
		flags uintptr
		data  string
	}{
		{[]string{"ro", "nosuid", "size=1m", "mode=1777", "rbind"}, unix.MS_RDONLY | unix.MS_NOSUID, "size=1m,mode=1777"},
		{[]string{"bind", "ro", "nodev", "noexec"}, unix.MS_RDONLY | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{[]string{"size=16m"}, 0, "size=16m"},
		{nil, 0, ""},
	} {
		flags, data := mountOptions(c.opts)
		if flags != c.flags || data != c.data {
			t.Errorf("mountOptions(%q) = %#x, %q; want %#x, %q", c.opts, flags, data, c.flags, c.data)
		}
	}
}

// TestRightsReaderKeepsTheTaskFiles: the join and the descriptors sent with
// it arrive together; more than maxJoin are closed, not kept.
func TestRightsReaderKeepsTheTaskFiles(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	fds := make([]int, maxJoin+2)
	for i := range fds {
		fds[i] = int(devnull.Fd())
	}
	msg, err := (&Join{TaskFiles: 3}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendmsg(pair[0], msg, unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	r := newRightsReader(pair[1], maxJoin)
	data, err := readMessage(r, maxJoinSize)
	if err != nil {
		t.Fatal(err)
	}
	var join Join
	if err := join.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	if join.TaskFiles != 3 || len(r.fds) != maxJoin {
		t.Fatalf("task files %d, %d fds kept (want %d)", join.TaskFiles, len(r.fds), maxJoin)
	}
	// What it kept are not task files: joining through them fails closed.
	if n, err := joinCgroups(r.fds); n != maxJoin || err == nil || !strings.Contains(err.Error(), "not on a cgroup file system") {
		t.Fatalf("joinCgroups: %d, %v", n, err)
	}
}

func TestFilesOutsideMounts(t *testing.T) {
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc"},
		{Destination: "/tmp", Type: "tmpfs"},
		{Destination: "/pyodide/", Type: "bind"},
		{Destination: "/tmp/deno", Type: "copy"},
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/job/main.js", true},
		{"/pmjail/bootstrap.js", true},
		{"/procfile", true},
		{"/tmp/x", false},
		{"/proc", false},
		{"proc/self/x", false},
		{"/pyodide/a/b.js", false},
		{"/job/../tmp/y", false},
	} {
		err := filesOutsideMounts([]layout.File{{Path: tc.path}}, mounts)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %t", tc.path, err, tc.ok)
		}
	}
}

// TestPremountedRootServesOnlyTheSameFiles: a premounted root serves mounts
// equal to its own whose sources are still the files it opened, looked up
// beneath newRootBase through the directory it covered; a changed option,
// a replaced file or a source path that is not clean does not. No mount is
// made: the root's record alone is checked.
func TestPremountedRootServesOnlyTheSameFiles(t *testing.T) {
	dir, err := os.MkdirTemp(newRootBase, "initstage-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := dir + "/f"
	if err := os.WriteFile(file, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(file, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	under, err := unix.Open(newRootBase, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(under)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	bind := func(src string, opts ...string) []specs.Mount {
		return []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/f", Type: "bind", Source: src, Options: append([]string{"ro"}, opts...)},
		}
	}
	r := &premountedRoot{mounts: bind(file), sources: []int{-1, fd}, ids: []fileID{{}, {st.Dev, st.Ino}}, under: under}
	if !r.serves(bind(file)) {
		t.Fatal("the same mounts over the same files: not served")
	}
	for name, mounts := range map[string][]specs.Mount{
		"another option":  bind(file, "noexec"),
		"one mount fewer": bind(file)[1:],
		"another path":    bind("/" + file),
	} {
		if r.serves(mounts) {
			t.Errorf("%s: served", name)
		}
	}
	// Premounted and asked for alike, yet not clean: here both reach the
	// file, but in a child they could reach the premounted root instead.
	for _, src := range []string{"/" + file, newRootBase + "/../" + file} {
		unclean := &premountedRoot{mounts: bind(src), sources: r.sources, ids: r.ids, under: under}
		if unclean.serves(bind(src)) {
			t.Errorf("source %s: served", src)
		}
	}
	if err := os.WriteFile(dir+"/g", []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+"/g", file); err != nil {
		t.Fatal(err)
	}
	if r.serves(bind(file)) {
		t.Error("a replaced source: served")
	}
	var nilRoot *premountedRoot
	if nilRoot.serves(bind(file)) {
		t.Error("no premounted root: served")
	}
}

// TestSetUpNamesTheFailedStep: a set-up that stops reports the step's
// stage and layer, and runs nothing after it. Both cases stop before any
// mount: in the test's own mount namespace the check refuses to go on.
func TestSetUpNamesTheFailedStep(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		t.Fatal(err)
	}
	joined := false
	join := func() error { joined = true; return nil }
	for _, tc := range []struct {
		name  string
		cfg   Config
		stage Stage
		layer Layer
		text  string
	}{
		{"no process", Config{HostMountNS: st.Ino}, StageConfig, "", "config: no process to run"},
		{"host's mounts", Config{Process: &specs.Process{Args: []string{"/bin/true"}}, HostMountNS: st.Ino},
			StageMountNS, LayerMountNS, "mount namespace: not in a private mount namespace"},
	} {
		_, err := setUp(&tc.cfg, nil, join)
		var se *stageError
		if !errors.As(err, &se) || se.stage != tc.stage || se.layer != tc.layer || !strings.HasPrefix(err.Error(), tc.text) {
			t.Errorf("%s: %v (%+v), want stage %s, layer %q, %q", tc.name, err, se, tc.stage, tc.layer, tc.text)
		}
	}
	if joined {
		t.Error("a set-up that stopped at its first steps joined the cgroup")
	}
}
