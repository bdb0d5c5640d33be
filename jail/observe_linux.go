package jail

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/kfile"
	"github.com/pmjail/pmjail/netns"
)

// Observed is the contained process's real state, read back from /proc
// once the runtime runs: the evidence behind a run's posture, as the
// socket contract carries it.
type Observed = api.Observed

var namespaceNames = []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"}

// ownNamespaces are the supervisor's own namespace inodes, by name, read
// once: a process keeps its namespaces (a goroutine that moves its own
// thread does not move the process, which /proc/self names). A name this
// kernel lacks is left out.
var ownNamespaces = sync.OnceValue(func() map[string]uint64 {
	own := map[string]uint64{}
	for _, ns := range namespaceNames {
		if ino, err := nsInode("self", ns); err == nil {
			own[ns] = ino
		}
	}
	return own
})

// ownMountNS is the supervisor's mount namespace inode, which each init
// stage must prove it is not in; read once, as ownNamespaces.
var ownMountNS = sync.OnceValues(func() (uint64, error) { return nsInode("self", "mnt") })

// observe reads pid's state. A process that has already exited yields an
// Observed with Error set rather than a guess.
func observe(pid int) *Observed {
	o := &Observed{PID: pid, Namespaces: map[string]bool{}, NamespaceIDs: map[string]uint64{}}
	p := strconv.Itoa(pid)
	status, err := ProcStatus(p)
	if err != nil {
		o.Error = err.Error()
		return o
	}
	o.NoNewPrivs = status["NoNewPrivs"] == "1"
	o.Seccomp, _ = strconv.Atoi(status["Seccomp"])
	o.SeccompFilters, _ = strconv.Atoi(status["Seccomp_filters"])
	o.CapEff, o.CapPrm, o.CapInh = status["CapEff"], status["CapPrm"], status["CapInh"]
	o.CapBnd, o.CapAmb = status["CapBnd"], status["CapAmb"]
	o.HostUID, _ = strconv.Atoi(firstField(status["Uid"]))
	o.HostGID, _ = strconv.Atoi(firstField(status["Gid"]))
	// A process that exits while it is read still has a status, but no
	// namespaces, mounts or cgroups of its own any more: such a half-read is
	// reported as an exit, never as what the process had.
	exited := func(what string, err error) *Observed {
		return &Observed{PID: pid, Error: fmt.Sprintf("the process exited while it was read back (%s: %v)", what, err)}
	}
	for ns, mine := range ownNamespaces() {
		theirs, err := nsInode(p, ns)
		if err != nil {
			return exited(ns+" namespace", err)
		}
		o.NamespaceIDs[ns] = theirs
		o.Namespaces[ns] = mine != theirs
	}
	if data, err := kfile.Read("/proc/" + p + "/cgroup"); err == nil {
		o.Cgroups = strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	if data, err := kfile.Read("/proc/" + p + "/mountinfo"); err == nil {
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
	if o.Mounts == 0 {
		return exited("mountinfo", errors.New("no mounts"))
	}
	if rep, err := netns.Inspect(pid); err == nil {
		o.Network = &rep
	}
	if data, err := kfile.Read("/proc/" + p + "/limits"); err == nil {
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

// ProcStatus reads /proc/<pid>/status ("self" for this process) into its
// fields, values trimmed.
func ProcStatus(pid string) (map[string]string, error) {
	data, err := kfile.Read("/proc/" + pid + "/status")
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if key, val, ok := strings.Cut(line, ":"); ok {
			fields[key] = strings.TrimSpace(val)
		}
	}
	return fields, nil
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}
