package jail

import (
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// watchExit calls died, in a goroutine of its own that wg counts, once
// the process pid has exited (a zombie included), unless the returned
// stop is called first. stop does not wait for the goroutine (it is
// called on a run's path, as the run takes the process): a died already
// under way may still run after it, so died must check that the process
// is still the pool's. The goroutine waits on the process's pidfd through
// the runtime's poller, holding no thread. Without pidfds (before Linux
// 5.10) nothing watches, and stop does nothing.
//
// It is how the pools (Pool, Warm) learn at once that a process waiting
// in them died (killed from outside, or by the OOM killer), rather than
// when a run comes to take it: until then its zombie, its lease of host
// ids and its cgroup would stay, and the pool would count it.
func watchExit(pid int, wg *sync.WaitGroup, died func()) (stop func()) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return func() {}
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return func() {}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Closing f (stop) ends the wait with an error.
		err := rc.Read(func(fd uintptr) bool {
			n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0
		})
		f.Close()
		if err == nil {
			died()
		}
	}()
	// Closing a file the poller waits on waits for that wait to end, a
	// hand-off to the watching goroutine: not on the run's path.
	return func() { go f.Close() }
}

// dropIdle removes v from (*idle)[k], a pool's idle processes, under mu,
// and reports whether it was there: a watched process that died while it
// waited is the watch's to end, one no longer idle is whoever took it's.
func dropIdle[K comparable, V comparable](mu *sync.Mutex, idle *map[K][]V, k K, v V) bool {
	mu.Lock()
	defer mu.Unlock()
	q := (*idle)[k]
	i := slices.Index(q, v)
	if i >= 0 {
		(*idle)[k] = slices.Delete(q, i, i+1)
	}
	return i >= 0
}
