package jail

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/jail/initstage"
)

func reportPair(t *testing.T) (host *os.File, child int) {
	t.Helper()
	host, c, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close(); c.Close() })
	return host, int(c.Fd())
}

func encodeReport(t *testing.T, r initstage.Report) []byte {
	t.Helper()
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Two reports sent back to back (set-up, then a failed exec) are read as
// two: the first read takes nothing of the second.
func TestReadReportStopsAtItsEnd(t *testing.T) {
	host, child := reportPair(t)
	first := encodeReport(t, initstage.Report{Landlock: 4, FDs: []string{initstage.FDSeccomp}})
	second := encodeReport(t, initstage.Report{Error: "exec /x: no such file", Stage: initstage.StageExec, ExitCode: 127})
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	if err := unix.Sendmsg(child, first, unix.UnixRights(int(devnull.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(child, second); err != nil {
		t.Fatal(err)
	}
	r, fds, err := initstage.ReadReport(int(host.Fd()))
	if err != nil || r.Landlock != 4 || len(fds) != 1 {
		t.Fatalf("first report %+v, fds %v, %v", r, fds, err)
	}
	unix.Close(fds[0])
	r, fds, err = initstage.ReadReport(int(host.Fd()))
	if err != nil || r.Stage != initstage.StageExec || r.ExitCode != 127 || len(fds) != 0 {
		t.Fatalf("second report %+v, fds %v, %v", r, fds, err)
	}
}

// A broken report is an error, and the descriptors that came with it are
// closed, not handed on.
func TestReadReportRefusesBrokenReports(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"huge", []byte{0, 0, 0, 1}, "exceeds"},
		{"cut short", encodeReport(t, initstage.Report{Error: "x"})[:6], io.ErrUnexpectedEOF.Error()},
		{"not a report", append([]byte{4, 0, 0, 0}, "{}\n\n"...), "magic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, child := reportPair(t)
			devnull, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer devnull.Close()
			if err := unix.Sendmsg(child, c.msg, unix.UnixRights(int(devnull.Fd())), nil, 0); err != nil {
				t.Fatal(err)
			}
			unix.Shutdown(child, unix.SHUT_WR)
			before := devNullFDs(t)
			_, fds, err := initstage.ReadReport(int(host.Fd()))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if after := devNullFDs(t); len(fds) != 0 || after > before {
				t.Fatalf("fds %v kept; fds open on /dev/null %d, before %d", fds, after, before)
			}
		})
	}
	host, child := reportPair(t)
	unix.Shutdown(child, unix.SHUT_WR)
	if _, _, err := initstage.ReadReport(int(host.Fd())); !errors.Is(err, io.EOF) {
		t.Fatalf("no report: %v, want EOF", err)
	}
}

// devNullFDs counts this process's fds open on /dev/null, which a kept
// descriptor of a broken report would add to. Counting all fds would not
// do: an earlier run's mount namespace is let go in the background (see
// Run), and its close can fall between two counts.
func devNullFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == os.DevNull {
			n++
		}
	}
	return n
}
