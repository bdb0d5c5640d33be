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
// output's drain, the session's end. A step that takes longer gives the
// answer up, and the run ends as without one.
const answerWithin = 100 * time.Millisecond

// answersEarly reports whether the run, whose guest has said how it exits,
// is answered before its teardown: a warm run (the daemon's) whose caller
// takes an early answer.
func (s *supervision) answersEarly() bool {
	return s.job.Answer != nil && s.out.Warm
}

// answer ends a run whose guest said how it exits (Job.Exited), in this
// order: the job cgroup's CPU time read; the runtime killed through its
// pidfd, which ends every thread of it on its way back to user space, so
// that none runs on and no more than a write already under way can still
// reach a pipe, then pid 1 (the init stage), whose death ends any other
// process of the namespace once it has exited itself; the output the
// pipes hold drained, a prefix of what the jail wrote in whole writes,
// all it wrote before the exit frame included; the session's end awaited
// (the exit frame is its last); the outcome settled and handed to
// Job.Answer. Then it returns pid 1's end: what the teardown costs (the
// kernel freeing the runtime's memory, the namespaces) is no longer part
// of the answer. A step that does not complete within answerWithin leaves
// the run unanswered, to end as without Job.Answer.
//
// Not a freeze of the cgroup: a runtime already in its own exit reaches
// the freezer only once it is out of it, which took a millisecond.
func (s *supervision) answer(waited <-chan exit, out *outputs, sessionDone <-chan struct{}) exit {
	var cpu time.Duration
	var cpuErr error
	if cg := s.cg(); cg != nil {
		cpu, cpuErr = cg.CPUTime()
	}
	// Not pid 1 alone: the kernel kills the rest of the namespace only
	// once pid 1 has exited, and until then the runtime's threads (a
	// Worker's) run on, with CPU time the answer does not count. The
	// runtimes served warm start no process of their own.
	if s.runtime >= 0 {
		_ = unix.PidfdSendSignal(s.runtime, unix.SIGKILL, nil, 0)
	}
	_ = s.child.proc.Signal(syscall.SIGKILL)
	if cpuErr == nil && out.flush() == nil && awaitWithin(sessionDone, answerWithin) {
		s.settle(out, cpu)
		s.answered = true
		s.job.Answer(s.out)
	}
	return <-waited
}

// settle is finish for an answered run: its exit code is the one the
// guest said, unless a limit or a cancellation ended it first, or its CPU
// time at the exit frame, cpu, passed the limit (the poll may not have
// seen it); its usage is the cgroup's, with that CPU time.
func (s *supervision) settle(o *outputs, cpu time.Duration) {
	s.takeOutput(o)
	if s.job.CPUTime > 0 && cpu-s.cpuBase >= s.job.CPUTime {
		s.note(s.cpuLimit())
	}
	s.out.Wall = time.Since(s.started)
	s.account()
	if s.out.UsageErr == nil && s.out.Cgroup != nil && s.out.CgroupErr == nil {
		// What the dying tasks' exit costs is the teardown's.
		s.out.Usage.CPUTime = max(cpu-s.cpuBase, 0)
	}
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
// would block, and goes on reading as before. With the writers killed,
// the captures then hold all the answer reports.
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
// (or ends).
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
