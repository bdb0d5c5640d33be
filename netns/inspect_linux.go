package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNotSupported means the host cannot show a process's network namespace
// (no /proc/<pid>/ns/net, i.e. no network namespaces).
var ErrNotSupported = errors.New("netns: network namespaces not supported")

// Interface is one network interface seen inside a namespace.
type Interface struct {
	Name string `json:"name"`
	Up   bool   `json:"up"`
}

// Report says whether a process is isolated from the host's network.
type Report struct {
	// Isolated is true when the process has a network namespace of its
	// own (a different inode from the supervisor's) holding only "lo".
	Isolated bool `json:"isolated"`
	// HostInode and JobInode identify the supervisor's and the job's
	// network namespaces (the inode of /proc/<pid>/ns/net).
	HostInode uint64 `json:"host_inode"`
	JobInode  uint64 `json:"job_inode"`
	// Interfaces are the links inside the job's namespace.
	Interfaces []Interface `json:"interfaces"`
	// Reason explains a report that is not isolated.
	Reason string `json:"reason,omitempty"`
}

// Inspect compares the network namespace of pid with the supervisor's own
// and lists the links inside it.
func Inspect(pid int) (Report, error) {
	// The process's namespace rather than netns.Get's calling thread's: a
	// goroutine elsewhere may have moved its own thread.
	host, err := netns.GetFromPid(os.Getpid())
	if err != nil {
		return Report{}, nsError("open own network namespace", err)
	}
	defer host.Close()
	job, err := netns.GetFromPid(pid)
	if err != nil {
		return Report{}, nsError(fmt.Sprintf("open network namespace of pid %d", pid), err)
	}
	defer job.Close()

	var r Report
	if r.HostInode, err = inode(host); err != nil {
		return Report{}, fmt.Errorf("inspect own network namespace: %w", err)
	}
	if r.JobInode, err = inode(job); err != nil {
		return Report{}, fmt.Errorf("inspect network namespace of pid %d: %w", pid, err)
	}

	// Listing links needs only the route family: a socket for each of the
	// others (xfrm, netfilter) would cost a namespace switch apiece.
	h, err := netlink.NewHandleAt(job, unix.NETLINK_ROUTE)
	if err != nil {
		return Report{}, fmt.Errorf("netlink in network namespace of pid %d: %w", pid, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return Report{}, fmt.Errorf("list links of pid %d: %w", pid, err)
	}
	var others []string
	for _, l := range links {
		a := l.Attrs()
		r.Interfaces = append(r.Interfaces, Interface{Name: a.Name, Up: a.Flags&net.FlagUp != 0})
		if a.Name != "lo" {
			others = append(others, a.Name)
		}
	}
	slices.SortFunc(r.Interfaces, func(a, b Interface) int { return strings.Compare(a.Name, b.Name) })

	switch {
	case r.HostInode == r.JobInode:
		r.Reason = "the job shares the supervisor's network namespace"
	case len(others) > 0:
		slices.Sort(others)
		r.Reason = "the job's network namespace has interfaces besides lo: " + strings.Join(others, ", ")
	default:
		r.Isolated = true
	}
	return r, nil
}

func inode(h netns.NsHandle) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(h), &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	return st.Ino, nil
}

func nsError(what string, err error) error {
	// /proc/self/ns/net is missing only when the kernel has no network
	// namespaces; for another pid ENOENT more likely means it has exited.
	if errors.Is(err, os.ErrNotExist) {
		if _, statErr := os.Stat("/proc/self/ns/net"); errors.Is(statErr, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", what, errors.Join(ErrNotSupported, err))
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}
