package initstage

import "testing"

func TestConstructorRoleIsRole(t *testing.T) {
	if got := constructorRole(); got != Role {
		t.Fatalf("the cgroup-join constructor acts on argv[1] %q, the init stage runs as %q", got, Role)
	}
}

func TestJoinEnv(t *testing.T) {
	if got := JoinEnv(5, 4); got != "PMJAIL_CGROUP_JOIN=5:4" {
		t.Fatalf("JoinEnv(5, 4) = %q", got)
	}
}

func TestMountOptions(t *testing.T) {
	flags, data := mountOptions([]string{"ro", "nosuid", "size=1m", "mode=1777", "rbind"})
	if flags == 0 || data != "size=1m,mode=1777" {
		t.Fatalf("flags %x data %q", flags, data)
	}
}
