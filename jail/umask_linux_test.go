package jail

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// TestJailWhateverTheUmask: a jail started while its supervisor's umask
// masks everything (a daemon binds its socket under umask 0777 while its
// warm runtimes start) builds the same root: its runtime starts and says
// it is ready. The root's directories used to take the umask, and the
// guest, no longer able to pass /runtime, failed to exec its runtime
// (EACCES).
func TestJailWhateverTheUmask(t *testing.T) {
	testenv.RequireRoot(t)
	h := &testCgroups{t: t, m: cgroupManager(t)}
	wj := warmShell(t, h, `printf '\0\0\0\020{"type":"ready"}' > /pmjail/channel/out; read x < /pmjail/channel/in`, 10*time.Second)
	old := unix.Umask(0o777)
	r, err := startWarm(t.Context(), wj.Template)
	unix.Umask(old)
	if err != nil {
		t.Fatalf("a runtime started under umask 0777: %v", err)
	}
	if err := r.discard(); err != nil {
		t.Error(err)
	}
}
