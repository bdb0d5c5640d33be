package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/api"
)

// ErrNotSupported means the host cannot show a process's network namespace
// (no /proc/<pid>/ns/net, i.e. no network namespaces).
var ErrNotSupported = errors.New("netns: network namespaces not supported")

// Interface is one network interface seen inside a namespace (the
// socket contract's type: a run's posture carries it).
type Interface = api.Interface

// Report says whether a process is isolated from the host's network (the
// socket contract's api.Network).
type Report = api.Network

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

	links, err := listLinks(job)
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

// The links of a job's namespace are listed by one thread kept for that
// alone: it enters the namespace, opens a netlink socket and goes back,
// and no other goroutine ever runs on it. netlink.NewHandleAt would move
// a shared thread instead, and a thread whose move back failed would go on
// running the daemon's goroutines inside the job's namespace.
//
// Nor may that thread end after each use, although a thread that ends
// takes its namespace with it: the parent-death signal of the children
// the jail starts fires when the thread that started them ends, and any
// pooled thread may have started one. So the worker locks its thread for
// good, and if it cannot go back it stays parked there forever: a thread
// and a namespace kept, never a job killed nor a daemon thread inside a
// job.
var worker struct {
	sync.Mutex
	requests chan linksRequest // nil until first used, or after it broke
}

type linksRequest struct {
	ns    netns.NsHandle
	reply chan<- linksReply
}

type linksReply struct {
	links []netlink.Link
	err   error
	// gone: the worker has stopped serving (a new one is needed).
	gone bool
}

// listLinks lists the links of the network namespace ns.
func listLinks(ns netns.NsHandle) ([]netlink.Link, error) {
	worker.Lock()
	defer worker.Unlock()
	if worker.requests == nil {
		worker.requests = make(chan linksRequest)
		go serveLinks(worker.requests)
	}
	reply := make(chan linksReply, 1)
	worker.requests <- linksRequest{ns: ns, reply: reply}
	r := <-reply
	if r.gone {
		worker.requests = nil
	}
	return r.links, r.err
}

// serveLinks is the worker: it owns its OS thread from its first
// instruction to the end of the process.
func serveLinks(requests <-chan linksRequest) {
	runtime.LockOSThread()
	// The process's namespace rather than netns.Get's calling thread's:
	// this thread is whichever the scheduler had free.
	home, err := netns.GetFromPid(os.Getpid())
	if err == nil {
		err = netns.Set(home)
	}
	if err != nil {
		req := <-requests
		if home.IsOpen() {
			home.Close()
		}
		req.reply <- linksReply{err: nsError("open own network namespace", err), gone: true}
		runtime.UnlockOSThread() // never moved: it may serve others
		return
	}
	for req := range requests {
		links, err := linksIn(req.ns)
		if backErr := netns.Set(home); backErr != nil {
			req.reply <- linksReply{err: errors.Join(err, fmt.Errorf("return to own network namespace: %w", os.NewSyscallError("setns", backErr))), gone: true}
			select {} // see worker: parked in the job's namespace for good
		}
		req.reply <- linksReply{links: links, err: err}
	}
}

// linksIn enters ns and lists its links. Only the calling worker's thread
// moves, and the caller moves it back.
func linksIn(ns netns.NsHandle) ([]netlink.Link, error) {
	if err := netns.Set(ns); err != nil {
		return nil, fmt.Errorf("enter network namespace: %w", os.NewSyscallError("setns", err))
	}
	// Listing links needs only the route family: no socket for the others
	// (xfrm, netfilter), which netlink.NewHandle would open by default.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	return h.LinkList()
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
