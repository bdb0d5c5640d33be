package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// needPipeBudget skips where the kernel bounds no user's pipes.
func needPipeBudget(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	soft, err := os.ReadFile("/proc/sys/fs/pipe-user-pages-soft")
	testenv.Need(t, err == nil && strings.TrimSpace(string(soft)) != "0", "a per-user pipe budget (fs.pipe-user-pages-soft)")
}

// chargedTo reports whether the kernel charges pipe f's pages to host uid
// (pipe->user): on a thread of its own with uid's real uid and no
// capability, it spends uid's whole pipe budget (fs.pipe-user-pages-soft),
// then shrinks f to a page and grows it back to 1 MiB, which the kernel
// refuses (EPERM) only when f's pages are uid's. f is left at a page if
// they are; the budget is given back.
func chargedTo(t *testing.T, f *os.File, uid int) bool {
	t.Helper()
	type verdict struct {
		charged bool
		err     error
	}
	done := make(chan verdict, 1)
	go func() {
		runtime.LockOSThread()
		var held []int
		charged, err := spendThenGrow(f, uid, &held)
		// The budget is back before the verdict: a next check of the same
		// uid starts from it.
		closeFDs(held)
		// The thread is put back, or never unlocked nor ended: Go would end
		// it with this goroutine, and a child this thread started (its
		// parent-death signal) with it.
		if rerr := restoreThread(); rerr != nil {
			done <- verdict{err: errors.Join(err, rerr)}
			select {}
		}
		runtime.UnlockOSThread()
		done <- verdict{charged, err}
	}()
	v := <-done
	if v.err != nil {
		t.Fatalf("is the pipe charged to uid %d: %v", uid, v.err)
	}
	return v.charged
}

// spendThenGrow is chargedTo's work on its locked thread; held takes the
// pipes it made.
func spendThenGrow(f *os.File, uid int, held *[]int) (bool, error) {
	if err := setRealUID(uid); err != nil {
		return false, err
	}
	// No effective capability (pipe_is_unprivileged_user); the permitted
	// ones stay, for restoreThread.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return false, os.NewSyscallError("capget", err)
	}
	caps[0].Effective, caps[1].Effective = 0, 0
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return false, os.NewSyscallError("capset", err)
	}
	// Grow new pipes to 1 MiB until refused, then make more until one
	// comes with two pages (its default 16 would have passed the soft
	// limit) and 8 more of two: uid's count is past the limit, and any
	// pipe of uid's that grows is refused.
	small := 0
	for range 4096 {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return false, os.NewSyscallError("pipe2", err)
		}
		*held = append(*held, p[0], p[1])
		size, err := unix.FcntlInt(uintptr(p[0]), unix.F_GETPIPE_SZ, 0)
		if err == nil && size < 1<<16 {
			if small++; small > 8 {
				break
			}
			continue
		}
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, 1<<20); err != nil && !errors.Is(err, unix.EPERM) {
			return false, os.NewSyscallError("fcntl(F_SETPIPE_SZ)", err)
		}
	}
	if small <= 8 {
		return false, fmt.Errorf("uid %d's pipe budget not spent after 4096 pipes", uid)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var shrinkErr, growErr error
	if err := rc.Control(func(fd uintptr) {
		_, shrinkErr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, os.Getpagesize())
		_, growErr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20)
	}); err != nil {
		return false, err
	}
	switch {
	case shrinkErr != nil:
		return false, fmt.Errorf("shrink the pipe: %w", shrinkErr)
	case growErr == nil:
		return false, nil
	case errors.Is(growErr, unix.EPERM):
		return true, nil
	}
	return false, fmt.Errorf("grow the pipe: %w", growErr)
}

// restoreThread gives the calling thread its effective capabilities and
// real uid 0 back, after spendThenGrow.
func restoreThread() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	caps[0].Effective, caps[1].Effective = caps[0].Permitted, caps[1].Permitted
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	if err := setRealUID(0); err != nil {
		return err
	}
	if ruid, _, _ := unix.Getresuid(); ruid != 0 {
		return fmt.Errorf("real uid %d after restoring 0", ruid)
	}
	return nil
}

// TestChargedToSeesTheMaker: chargedTo tells a pipe made by this process
// (root) from one made under another uid (guestPipes), or the tests
// below could not fail.
func TestChargedToSeesTheMaker(t *testing.T) {
	needPipeBudget(t)
	const uid = idBase - 1 // no lease's: no job charges it meanwhile
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if chargedTo(t, r, uid) {
		t.Errorf("a pipe root made is charged to uid %d", uid)
	}
	pipes, err := guestPipes(uid, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pipes[0][0].Close()
	defer pipes[0][1].Close()
	if !chargedTo(t, pipes[0][1], uid) {
		t.Errorf("a pipe made as uid %d is not charged to it", uid)
	}
	if ruid, euid, suid := unix.Getresuid(); ruid != 0 || euid != 0 || suid != 0 {
		t.Errorf("this thread's uids %d/%d/%d after guestPipes", ruid, euid, suid)
	}
}

// TestOutputPipesChargedToTheGuest: guest → host. The pipes a started
// init stage writes its output to (the guest's stdout and stderr, which
// it may grow) are charged to the job's guest id, not to root, whether
// the child starts for its run, waits in a pool, or runs a warm runtime
// that waits for its run (with its channel's FIFOs, which the runtime
// holds as well): the guest id of the lease the run keeps.
func TestOutputPipesChargedToTheGuest(t *testing.T) {
	needPipeBudget(t)
	check := func(name string, c *child) {
		t.Helper()
		for stream, f := range map[string]*os.File{"stdout": c.stdout, "stderr": c.stderr} {
			if !chargedTo(t, f, c.lease.guestID()) {
				t.Errorf("%s: the child's %s is not charged to its guest id %d", name, stream, c.lease.guestID())
			}
		}
	}
	flags := cloneFlags(shellJob(t, `true`, testLimits).Spec)
	for name, flags := range map[string]uintptr{"started": flags, "started without a user namespace": flags &^ unix.CLONE_NEWUSER} {
		c, stage, err := startChild(flags, nil)
		if err != nil {
			t.Fatalf("%s: %s: %v", name, stage, err)
		}
		check(name, c)
		if err := c.discard(); err != nil {
			t.Error(err)
		}
	}
	p := filledPool(t, 1)
	check("pooled", firstIdle(p))

	h := &testCgroups{t: t, m: cgroupManager(t)}
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{})
	t.Cleanup(w.Close)
	w.Learn(warmShell(t, h, `printf '\0\0\0\020{"type":"ready"}' > /pmjail/channel/out; read x < /pmjail/channel/in`, 10*time.Second))
	r := waitWarmIdle(t, w)
	check("warm", r.child)
	fc := r.conn.(*fifoConn)
	for _, f := range []*os.File{fc.r, fc.w} {
		if !chargedTo(t, f, r.child.lease.guestID()) {
			t.Errorf("warm: the runtime's channel %s is not charged to its guest id %d", f.Name(), r.child.lease.guestID())
		}
	}
}

// TestChannelChargedToTheGuest: guest → host. The guest channel's FIFOs,
// which the init stage opens first and the supervisor grows to 1 MiB,
// are charged to the job's guest id (their owner): not to host root, nor
// to the namespace's root id.
func TestChannelChargedToTheGuest(t *testing.T) {
	needPipeBudget(t)
	t.Run("user namespace", func(t *testing.T) { channelChargedToTheGuest(t, true) })
	// A host without user namespaces runs the init stage as host root,
	// and the guest as the lease's guest id.
	t.Run("no user namespace", func(t *testing.T) { channelChargedToTheGuest(t, false) })
}

func channelChargedToTheGuest(t *testing.T, userns bool) {
	job := shellJob(t, `exit 0`, testLimits)
	if !userns {
		job.Spec.Linux.Namespaces = slices.DeleteFunc(job.Spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
			return ns.Type == specs.UserNamespace
		})
	}
	checked := false
	job.Channel = func(_ context.Context, conn net.Conn) error {
		fc := conn.(*fifoConn)
		var st unix.Stat_t
		rc, err := fc.r.SyscallConn()
		if err != nil {
			return err
		}
		var statErr error
		if err := rc.Control(func(fd uintptr) { statErr = unix.Fstat(int(fd), &st) }); err != nil || statErr != nil {
			return errors.Join(err, statErr)
		}
		if st.Uid < idBase {
			return fmt.Errorf("the channel is owned by uid %d, not a job's", st.Uid)
		}
		for _, f := range []*os.File{fc.r, fc.w} {
			if !chargedTo(t, f, int(st.Uid)) {
				t.Errorf("the channel's %s is not charged to the guest's uid %d", f.Name(), st.Uid)
			}
		}
		checked = true
		return nil
	}
	out := Run(context.Background(), job)
	if out.Status != StatusOK {
		t.Fatalf("status %s %q stderr %q", out.Status, out.Message, out.Stderr)
	}
	if !checked {
		t.Fatal("the channel was not served")
	}
}

// BenchmarkOutputPipes: a run's two output pipes made as root (os.Pipe,
// as before) and under its guest id (guestPipes).
func BenchmarkOutputPipes(b *testing.B) {
	testenv.RequireRoot(b)
	closePipes := func(r, w *os.File) {
		r.Close()
		w.Close()
	}
	b.Run("root", func(b *testing.B) {
		for b.Loop() {
			for range 2 {
				r, w, err := os.Pipe()
				if err != nil {
					b.Fatal(err)
				}
				closePipes(r, w)
			}
		}
	})
	b.Run("guest", func(b *testing.B) {
		for b.Loop() {
			pipes, err := guestPipes(idBase-1, 2)
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range pipes {
				closePipes(p[0], p[1])
			}
		}
	})
}

// TestGuestPipesLendNoThreadTheGuestsUID: guest → host. While
// guestPipes makes a job's pipes, one thread of the supervisor has the
// job's guest id as its real uid, the id whose processes may signal a
// task of that real uid (kill(2)) or renice it: no other goroutine may
// run on that thread meanwhile, nor find the id left on any thread
// after. Goroutines that yield all the while read their thread's real
// uid as guestPipes runs again and again.
func TestGuestPipesLendNoThreadTheGuestsUID(t *testing.T) {
	testenv.RequireRoot(t)
	// No lease's, nor TestChargedToSeesTheMaker's, whose count of idBase-1
	// this test's pipes would disturb in another test process.
	const uid = idBase - 2
	stop := make(chan struct{})
	var seen atomic.Int64
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ruid, _, _ := unix.Getresuid(); ruid != 0 {
					seen.Add(1)
				}
				runtime.Gosched()
			}
		})
	}
	for range 3000 {
		pipes, err := guestPipes(uid, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pipes {
			p[0].Close()
			p[1].Close()
		}
	}
	close(stop)
	wg.Wait()
	if n := seen.Load(); n > 0 {
		t.Errorf("other goroutines ran %d times on a thread whose real uid was not root's", n)
	}
	if ruid, euid, suid := unix.Getresuid(); ruid != 0 || euid != 0 || suid != 0 {
		t.Errorf("this thread's uids %d/%d/%d after guestPipes", ruid, euid, suid)
	}
}
