package jail

import (
	"sync"

	"github.com/pmjail/pmjail/internal/sibling"
)

// InitBinaryName is the init stage's own binary, installed next to pmjail.
const InitBinaryName = "pmjail-init"

// initBuildID is the Go build ID of the pmjail-init built with this binary,
// recorded at link time (the Makefile passes
// -X github.com/pmjail/pmjail/jail.initBuildID=...). Empty in a binary
// built without it: it then is its own init stage.
var initBuildID string

// InitStage is the binary a job's init stage runs.
type InitStage struct {
	// Path is what the supervisor execs: pmjail-init, or /proc/self/exe.
	Path string
	// Self means the running binary serves as its own init stage, Reason
	// says why pmjail-init does not.
	Self   bool
	Reason string
}

// FindInitStage returns the init stage this process uses: pmjail-init from
// beside the running binary when it is the one built with it, the running
// binary itself otherwise (same code, slower start). It is decided once per
// process, so a daemon keeps its choice until it restarts: replace the
// binaries together, then restart it.
var FindInitStage = sync.OnceValue(func() *InitStage {
	path, err := sibling.Find(InitBinaryName, initBuildID)
	return initStage(path, err)
})

func initStage(path string, err error) *InitStage {
	if err != nil {
		return &InitStage{Path: "/proc/self/exe", Self: true, Reason: err.Error()}
	}
	return &InitStage{Path: path}
}
