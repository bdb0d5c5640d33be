//go:build !(amd64 && cgo)

package spawn

import (
	"errors"
	"os"
	"os/exec"
)

// canStartShared: this build (another architecture, or no cgo) starts
// every child through Go's start.
const canStartShared = false

func startShared(*exec.Cmd) (*os.Process, error) { return nil, errors.ErrUnsupported }
