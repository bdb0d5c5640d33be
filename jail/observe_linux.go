package jail

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/pmjail/pmjail/netns"
)

// Observed is the contained process's real state, read back from /proc
// once the runtime runs: the evidence behind a run's posture.
type Observed struct {
	PID            int               `json:"pid"`
	NoNewPrivs     bool              `json:"no_new_privs"`
	Seccomp        int               `json:"seccomp_mode"`
	SeccompFilters int               `json:"seccomp_filters"`
	CapEff         string            `json:"cap_eff"`
	CapPrm         string            `json:"cap_prm"`
	CapInh         string            `json:"cap_inh"`
	CapBnd         string            `json:"cap_bnd"`
	CapAmb         string            `json:"cap_amb"`
	HostUID        int               `json:"host_uid"`
	HostGID        int               `json:"host_gid"`
	Namespaces     map[string]bool   `json:"namespaces"`
	NamespaceIDs   map[string]uint64 `json:"namespace_inodes"`
	Cgroups        []string          `json:"cgroups,omitempty"`
	// RootReadOnly and Mounts describe the process's mount table.
	RootReadOnly bool `json:"root_read_only"`
	Mounts       int  `json:"mounts"`
	// CoreLimit and NoFileLimit are its RLIMIT_CORE and RLIMIT_NOFILE.
	CoreLimit   string `json:"rlimit_core"`
	NoFileLimit string `json:"rlimit_nofile"`
	// Network is what the process's network namespace holds.
	Network *netns.Report `json:"network,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// NoCapabilities reports whether every capability set is empty.
func (o *Observed) NoCapabilities() bool {
	for _, c := range []string{o.CapEff, o.CapPrm, o.CapInh, o.CapBnd, o.CapAmb} {
		if strings.Trim(c, "0") != "" {
			return false
		}
	}
	return true
}

var namespaceNames = []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"}

// observe reads pid's state. A process that has already exited yields an
// Observed with Error set rather than a guess.
func observe(pid int, lease *idLease) *Observed {
	o := &Observed{PID: pid, Namespaces: map[string]bool{}, NamespaceIDs: map[string]uint64{}}
	p := strconv.Itoa(pid)
	f, err := os.Open("/proc/" + p + "/status")
	if err != nil {
		o.Error = err.Error()
		return o
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "NoNewPrivs":
			o.NoNewPrivs = val == "1"
		case "Seccomp":
			o.Seccomp, _ = strconv.Atoi(val)
		case "Seccomp_filters":
			o.SeccompFilters, _ = strconv.Atoi(val)
		case "CapEff":
			o.CapEff = val
		case "CapPrm":
			o.CapPrm = val
		case "CapInh":
			o.CapInh = val
		case "CapBnd":
			o.CapBnd = val
		case "CapAmb":
			o.CapAmb = val
		case "Uid":
			o.HostUID, _ = strconv.Atoi(strings.Fields(val)[0])
		case "Gid":
			o.HostGID, _ = strconv.Atoi(strings.Fields(val)[0])
		}
	}
	for _, ns := range namespaceNames {
		mine, err1 := nsInode("self", ns)
		theirs, err2 := nsInode(p, ns)
		if err1 != nil || err2 != nil {
			continue
		}
		o.NamespaceIDs[ns] = theirs
		o.Namespaces[ns] = mine != theirs
	}
	if data, err := os.ReadFile("/proc/" + p + "/cgroup"); err == nil {
		o.Cgroups = strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	if data, err := os.ReadFile("/proc/" + p + "/mountinfo"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 {
				continue
			}
			o.Mounts++
			if f[4] == "/" {
				o.RootReadOnly = strings.HasPrefix(f[5], "ro")
			}
		}
	}
	if rep, err := netns.Inspect(pid); err == nil {
		o.Network = &rep
	}
	if data, err := os.ReadFile("/proc/" + p + "/limits"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			switch {
			case strings.HasPrefix(line, "Max core file size") && len(f) >= 6:
				o.CoreLimit = f[4] + "/" + f[5]
			case strings.HasPrefix(line, "Max open files") && len(f) >= 5:
				o.NoFileLimit = f[3] + "/" + f[4]
			}
		}
	}
	return o
}
