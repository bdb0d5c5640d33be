package job

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/runtimes"
)

// v8OutOfMemory is how Deno dies when the V8 heap cap, the memory bound of
// last resort, is reached.
var v8OutOfMemory = []string{"JavaScript heap out of memory", "Fatal JavaScript out of memory", "Fatal process out of memory"}

// v8Aborts are the signals V8 ends its process with on a fatal error,
// the heap cap reached among them (Deno's build traps: SIGTRAP).
var v8Aborts = []string{"SIGTRAP", "SIGABRT", "SIGILL"}

// v8Aborted reports whether the runtime died as V8 does when its heap cap
// is reached: its message on stderr and the abort after it. The message
// alone is anyone's to write: a guest that printed it and exited (or, in
// exec, raised a signal of its own) made its run a memory_limit without
// nearing any limit. Only a built-in runtime's V8 has the cap (an exec's
// program has none, whatever it prints), and its guest cannot send itself
// a signal (neither Deno's permissions nor Pyodide give it kill).
func v8Aborted(out *jail.Outcome) bool {
	if !slices.Contains(v8Aborts, out.Signal) {
		return false
	}
	for _, m := range v8OutOfMemory {
		if strings.Contains(out.Stderr, m) {
			return true
		}
	}
	return false
}

// assemble turns what the jail, the broker and the cgroup saw into the
// result, deciding the status by what ended the run first.
func (rn *Runner) assemble(res *jail.Result, r *Resolved, out *jail.Outcome, session *ipc.Outcome, haveCgroup bool, usage cgroup.Usage) {
	res.Status, res.ExitCode, res.Signal = out.Status, out.ExitCode, out.Signal
	res.Stdout, res.Stderr = out.Stdout, out.Stderr
	// Bytes that are not UTF-8 cross the wire in base64 (api.Encoding);
	// the result keeps them as they are, and its encoders convert.
	res.Encoding = api.Encoding{Stdout: api.OutputEncoding(out.Stdout), Stderr: api.OutputEncoding(out.Stderr)}
	res.Truncated = out.Truncated
	res.Truncated.Logs = session.LogsDropped > 0
	res.LimitsHit = append(res.LimitsHit, out.LimitsHit...)
	res.Value = session.Value
	res.Usage.BrokerCalls = session.Calls
	for _, l := range session.Logs {
		res.Logs = append(res.Logs, jail.LogEntry{Level: l.Level, Message: l.Message, Meta: l.Meta})
	}

	if haveCgroup {
		res.Usage.CPUMS = usage.CPUTime.Milliseconds()
		res.Usage.PeakMemoryBytes = usage.MemoryPeakBytes
		res.Usage.PeakTasks = usage.PidsPeak
		if usage.MemoryLimitHit || usage.OOMKills > 0 {
			res.LimitsHit = appendOnce(res.LimitsHit, "memory")
		}
		if usage.PidsLimitHit {
			res.LimitsHit = appendOnce(res.LimitsHit, "pids")
		}
	} else {
		res.Usage.CPUMS = out.CPU.Milliseconds()
		res.Usage.PeakMemoryBytes = out.MaxRSS
	}

	oom := haveCgroup && usage.OOMKills > 0
	heapOOM := r.Request.Exec == nil && v8Aborted(out)
	switch {
	case (out.Status == jail.StatusOK || out.Status == jail.StatusError || errors.Is(out.Err, jail.ErrInitEnded)) && (oom || heapOOM):
		// The job's memory ended it, whichever process the kernel's OOM
		// killer chose (the jail's pid 1 among them).
		setStatus(res, jail.StatusMemoryLimit)
		res.LimitsHit = appendOnce(res.LimitsHit, "memory")
		how := "the cgroup memory limit"
		if !oom {
			how = "the V8 heap cap"
		}
		res.Error = &jail.ErrorInfo{Code: "memory_limit", Message: fmt.Sprintf("memory limit of %v exceeded (%s)", r.Limits.Memory, how)}
	case out.Status == jail.StatusInternalError && out.InitStage == jail.StageBindSource && r.Request.Exec != nil:
		// An exec's --ro-bind path that is missing or not readable by
		// others: the job's own bad input.
		setStatus(res, jail.StatusRefused)
		res.Error = &jail.ErrorInfo{Code: "bind_source", Message: out.Message}
	case out.Status == jail.StatusInternalError:
		res.Error = &jail.ErrorInfo{Code: "internal", Message: out.Message}
		if out.InitStage != initstage.StageNone && r.Mode == ModeRequired {
			res.Status = jail.StatusRefused
			res.Error = &jail.ErrorInfo{Code: "refused", Message: "mode required: " + out.Message}
		}
	case out.Status == jail.StatusCancelled:
		// The session ends with the run's context, as it would on a
		// protocol error; the cancellation is the reason.
		res.Error = &jail.ErrorInfo{Code: string(jail.StatusCancelled), Message: out.Message}
	case session.ProtocolError != nil && out.Status != jail.StatusTimeout && out.Status != jail.StatusOutputLimit && out.Status != jail.StatusCPULimit:
		// A limit's kill can cut a frame short: the limit ended the run.
		setStatus(res, jail.StatusProtocolError)
		res.Error = &jail.ErrorInfo{Code: "protocol_error", Message: session.ProtocolError.Error()}
	case session.HostError != nil:
		setStatus(res, jail.StatusInternalError)
		res.Error = &jail.ErrorInfo{Code: "internal", Message: session.HostError.Error()}
	case out.Status == jail.StatusOK || out.Status == jail.StatusError:
		if g := session.Error; g != nil {
			res.Status = jail.StatusError
			if res.ExitCode == 0 {
				res.ExitCode = 1
			}
			res.Error = guestError(g, 0)
		} else if msg, report, ok := runtimes.TypeErrors(res.Stderr); ok && r.Request.TypeCheck && res.ExitCode == 1 && !session.Done {
			// Deno's type checker stopped the run before it began.
			res.Status = jail.StatusError
			res.Error = &jail.ErrorInfo{Code: "TypeError", Message: msg, Stack: report}
		} else if msg, report, ok := runtimes.UnsettledAwait(res.Stderr); ok && r.Runtime == runtimes.Deno && res.ExitCode == 1 && !session.Done {
			res.Status = jail.StatusError
			res.Error = &jail.ErrorInfo{Code: "UnsettledPromise", Message: msg, Stack: report}
		} else if res.ExitCode != 0 {
			res.Status = jail.StatusError
			msg := fmt.Sprintf("exited with code %d", res.ExitCode)
			if res.Signal != "" {
				msg = "killed by " + res.Signal
			}
			res.Error = &jail.ErrorInfo{Code: "exit", Message: msg}
		}
	default:
		res.Error = &jail.ErrorInfo{Code: string(out.Status), Message: out.Message}
	}
}

// maxCauses bounds the cause chain a result carries, whatever the guest
// sent.
const maxCauses = 8

// guestError is the result's error for what the guest reported.
func guestError(g *ipc.GuestError, depth int) *jail.ErrorInfo {
	e := &jail.ErrorInfo{Code: g.Name, Message: g.Message, Stack: g.Stack, Value: g.Value}
	if g.Cause != nil && depth < maxCauses {
		e.Cause = guestError(g.Cause, depth+1)
	}
	return e
}

func appendOnce(list []string, v string) []string {
	for _, x := range list {
		if x == v {
			return list
		}
	}
	return append(list, v)
}

// setStatus gives res status st and the exit code that status has.
func setStatus(res *jail.Result, st jail.Status) {
	res.Status = st
	res.ExitCode, _ = st.ExitCode()
}
