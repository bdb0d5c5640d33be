//go:build linux && !(amd64 && cgo)

package jail

import (
	"errors"
	"os"
	"os/exec"
)

// canSpawnShared: this build starts every init stage through Go.
const canSpawnShared = false

func spawnShared(*exec.Cmd) (*os.Process, error) { return nil, errors.ErrUnsupported }
