package jail

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
// process, so a daemon keeps its choice until it restarts: replace both
// binaries, then restart it.
var FindInitStage = sync.OnceValue(findInitStage)

func findInitStage() *InitStage {
	exe, err := os.Executable()
	if err != nil {
		return selfInit("locate the running binary: %v", err)
	}
	return initStageIn(filepath.Dir(exe), initBuildID)
}

// initStageIn picks the init stage: dir's pmjail-init if its Go build ID is
// want, else the running binary.
func initStageIn(dir, want string) *InitStage {
	if want == "" {
		return selfInit("this pmjail was built without its %s (use `make build`)", InitBinaryName)
	}
	path := filepath.Join(dir, InitBinaryName)
	f, err := os.Open(path)
	if err != nil {
		return selfInit("%v", err)
	}
	defer f.Close()
	id, err := goBuildID(f)
	if err != nil {
		return selfInit("%s: %v", path, err)
	}
	if id != want {
		return selfInit("%s is from another build than this pmjail (rebuild both with `make build`)", path)
	}
	return &InitStage{Path: path}
}

func selfInit(format string, args ...any) *InitStage {
	return &InitStage{Path: "/proc/self/exe", Self: true, Reason: fmt.Sprintf(format, args...)}
}

// goBuildID reads the Go build ID an ELF binary carries in its
// .note.go.buildid section (what `go tool buildid` prints).
func goBuildID(f *os.File) (string, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		return "", fmt.Errorf("read ELF: %w", err)
	}
	sec := ef.Section(".note.go.buildid")
	if sec == nil {
		return "", errors.New("no Go build ID")
	}
	note, err := sec.Data()
	if err != nil {
		return "", fmt.Errorf("read Go build ID: %w", err)
	}
	// An ELF note: name size, description size and type (4 bytes each),
	// the name "Go\0" padded to 4 bytes, then the description, the ID.
	const goBuildIDNote = 4
	if len(note) < 16 {
		return "", errors.New("malformed Go build ID note")
	}
	bo := ef.ByteOrder
	nameSize, descSize, typ := bo.Uint32(note), bo.Uint32(note[4:]), bo.Uint32(note[8:])
	nameEnd := 12 + uint64(nameSize+3)&^3
	if typ != goBuildIDNote || nameSize != 4 || !bytes.Equal(note[12:16], []byte("Go\x00\x00")) || nameEnd+uint64(descSize) > uint64(len(note)) {
		return "", errors.New("malformed Go build ID note")
	}
	return string(note[nameEnd : nameEnd+uint64(descSize)]), nil
}
