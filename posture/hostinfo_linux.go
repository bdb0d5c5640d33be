package posture

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/runtimes"
)

// attackSysctls widen the kernel surface an unprivileged process reaches.
var attackSysctls = []string{
	"kernel/unprivileged_userns_clone",
	"user/max_user_namespaces",
	"kernel/unprivileged_bpf_disabled",
	"vm/unprivileged_userfaultfd",
	"kernel/io_uring_disabled",
	"kernel/yama/ptrace_scope",
	"kernel/perf_event_paranoid",
	"kernel/kptr_restrict",
	"kernel/dmesg_restrict",
}

func hostInfo(in *runtimes.Install) Host {
	h := Host{Sysctls: map[string]string{}}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	for _, name := range attackSysctls {
		if data, err := os.ReadFile("/proc/sys/" + name); err == nil {
			h.Sysctls[strings.ReplaceAll(name, "/", ".")] = strings.TrimSpace(string(data))
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail"); err == nil {
		h.SeccompActions = strings.Fields(string(data))
	}
	if abi, err := llsys.LandlockGetABIVersion(); err == nil {
		h.LandlockABI = abi
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil {
		h.Privileged = os.Geteuid() == 0 && data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0
	}
	if in != nil {
		h.Runtimes = []Runtime{
			{Name: "deno", Version: packageVersion(filepath.Join(in.ModulesDir, "@deno", "linux-x64-glibc")), Path: in.DenoPath},
			{Name: "python", Version: "pyodide " + packageVersion(in.PyodideDir), Path: in.PyodideDir, Start: in.PythonStart()},
		}
	}
	return h
}

// packageVersion reads the version of an npm package directory.
func packageVersion(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return ""
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(data, &pkg) != nil {
		return ""
	}
	return pkg.Version
}
