package jail

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// answerWithin bounds each step of an early answer (Job.Answer): the
// freeze, the output's drain, the session's end. A step that takes longer
// gives the answer up, and the run ends as without one.
const answerWithin = 100 * time.Millisecond

// freezer is a job cgroup that can stop its tasks where they are.
type freezer interface {
	Freeze(on bool, deadline time.Time) bool
}

// answersEarly reports whether the run, whose guest has said how it exits,
// is answered before its teardown: a warm run (the daemon's) whose caller
// takes an early answer, in a cgroup with a freezer.
func (s *supervision) answersEarly() bool {
	if s.job.Answer == nil || !s.out.Warm {
		return false
	}
	_, ok := s.cg().(freezer)
	return ok
}

// answer ends a run whose guest said how it exits (Job.Exited), in this
// order: its cgroup frozen, so that no task of the job runs or writes any
// more; the output the pipes hold drained, which is then exactly what a
// kill at that moment would have left; the session's end awaited (the exit
// frame is its last); the outcome settled and handed to Job.Answer. Then,
// answered or not, it kills the jail and returns pid 1's end: what the
// teardown costs (the kernel freeing the runtime's memory, the namespaces)
// is no longer part of the answer. A step that does not complete within
// answerWithin leaves the run unanswered, to end as without Job.Answer.
func (s *supervision) answer(waited <-chan exit, out *outputs, sessionDone <-chan struct{}) exit {
	fz := s.cg().(freezer)
	frozen := fz.Freeze(true, time.Now().Add(answerWithin))
	if frozen && out.flush() == nil && awaitWithin(sessionDone, answerWithin) {
		s.settle(out)
		s.answered = true
		s.job.Answer(s.out)
	}
	_ = s.child.proc.Signal(syscall.SIGKILL)
	// Thawed after the kill: on cgroup v1 a frozen task's SIGKILL waits
	// for the thaw, and a thawed one must not run on.
	fz.Freeze(false, time.Now().Add(answerWithin))
	return <-waited
}

// settle is finish for an answered run: its exit code is the one the
// guest said, unless a limit or a cancellation ended it first, or its CPU
// time passed the limit before the freeze; its usage is the frozen
// cgroup's.
func (s *supervision) settle(o *outputs) {
	s.takeOutput(o)
	if cg := s.cg(); cg != nil && s.job.CPUTime > 0 {
		if used, err := cg.CPUTime(); err == nil && used-s.cpuBase >= s.job.CPUTime {
			s.note(s.cpuLimit())
		}
	}
	s.out.Wall = time.Since(s.started)
	s.account()
	if s.applyStopReason() {
		return
	}
	s.out.ExitCode = *s.said
	s.out.Status = StatusOK
	if s.out.ExitCode != 0 {
		s.out.Status = StatusError
	}
}

// awaitWithin waits for done for up to d.
func awaitWithin(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// errFlushLate is a drain that did not end within answerWithin.
var errFlushLate = errors.New("the output was not drained in time")

// flush drains both streams of what their pipes hold now: each stream's
// reader is woken (a read deadline in the past), reads its pipe until it
// would block, and goes on reading as before. With the writers frozen,
// the captures then hold all they will until the jail is killed.
func (o *outputs) flush() error {
	var wg sync.WaitGroup
	errs := make([]error, len(o.streams))
	for i, st := range o.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.flush()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if !awaitWithin(done, answerWithin) {
		return errFlushLate
	}
	return errors.Join(errs...)
}

// stream is one output pipe and the capture its reader fills.
type stream struct {
	r *os.File
	c *capture
	// asked carries a flush's request to the reader, and its answer back.
	asked chan chan error
	// gone is closed once the reader has returned (the pipe's EOF).
	gone chan struct{}
}

// read drains the pipe into the capture until its end, answering flushes
// on the way.
func (st *stream) read(overflow func()) {
	defer close(st.gone)
	defer st.r.Close()
	for {
		err := st.c.drain(st.r, overflow)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		// Only a flush sets a deadline: it waits for the answer.
		reply := <-st.asked
		if err := st.r.SetReadDeadline(time.Time{}); err != nil {
			reply <- err
			return
		}
		reply <- st.c.drainNow(st.r, overflow)
	}
}

// flush asks the reader to drain what the pipe holds now and waits for it.
// It is asked once a run (asked holds one request).
func (st *stream) flush() error {
	reply := make(chan error, 1)
	st.asked <- reply
	if err := st.r.SetReadDeadline(time.Unix(1, 0)); err != nil {
		select {
		case <-st.gone:
			return nil // the pipe ended: all of it was read
		default:
			return fmt.Errorf("flush output: %w", err)
		}
	}
	select {
	case err := <-reply:
		return err
	case <-st.gone:
		return nil
	}
}

// drainNow adds what the pipe f holds now, reading until it would block
// (or ends): with every writer frozen, that is all of it.
func (c *capture) drainNow(f *os.File, overflow func()) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	chunk := make([]byte, 32<<10)
	var readErr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Read(int(fd), chunk)
			if n > 0 {
				c.add(chunk[:n], overflow)
				continue
			}
			if err != nil && err != unix.EAGAIN && err != unix.EINTR {
				readErr = err
			}
			if err == unix.EINTR {
				continue
			}
			return true
		}
	})
	if err != nil {
		return err
	}
	return readErr
}
