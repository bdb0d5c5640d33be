// Package sibling finds the binaries pmjail installs beside its own —
// pmjail-init (a job's init stage) and pmjail-serve (the daemon) — and
// accepts one only when it comes from the same build as the running binary,
// by the Go build ID recorded at link time (`make build` passes them with
// -X). A binary from another build would speak another version of the
// protocol between them.
package sibling

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNoBuildID means the running binary was built without the sibling's
// build ID (a plain `go build` rather than `make build`).
var ErrNoBuildID = errors.New("built without its siblings' build IDs (use `make build`)")

// Find returns the path of name beside the running binary if its Go build
// ID is want.
func Find(name, want string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the running binary: %w", err)
	}
	return In(filepath.Dir(exe), name, want)
}

// In returns dir/name if its Go build ID is want.
func In(dir, name, want string) (string, error) {
	if want == "" {
		return "", fmt.Errorf("%s: %w", name, ErrNoBuildID)
	}
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	id, err := BuildID(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if id != want {
		return "", fmt.Errorf("%s is from another build than this binary (rebuild them together with `make build`)", path)
	}
	return path, nil
}

// BuildID reads the Go build ID an ELF binary carries in its
// .note.go.buildid section (what `go tool buildid` prints).
func BuildID(f *os.File) (string, error) {
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
