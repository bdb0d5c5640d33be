package initstage

import "testing"

func TestJoinEnv(t *testing.T) {
	if got := JoinEnv(5, 4); got != "PMJAIL_CGROUP_JOIN=5:4" {
		t.Fatalf("JoinEnv(5, 4) = %q", got)
	}
	first, count, err := parseJoin("5:4")
	if err != nil || first != 5 || count != 4 {
		t.Fatalf("parseJoin(5:4) = %d, %d, %v", first, count, err)
	}
	// The control socket and below are never task files; nor are
	// malformed or unbounded ranges.
	for _, bad := range []string{"", "5", "5:", ":4", "x:4", "5:x", "4:1", "2:1", "5:0", "5:-1", "5:17", "5:4:3"} {
		if _, _, err := parseJoin(bad); err == nil {
			t.Errorf("parseJoin(%q) accepted", bad)
		}
	}
}

func TestMountOptions(t *testing.T) {
	flags, data := mountOptions([]string{"ro", "nosuid", "size=1m", "mode=1777", "rbind"})
	if flags == 0 || data != "size=1m,mode=1777" {
		t.Fatalf("flags %x data %q", flags, data)
	}
}
