package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/jail"
)

// settleBinaries drops every binary the bench runs from the page cache and
// reads it back in order, as a binary installed on disk is read after a
// boot. How a file's pages sit in the cache moves a run: two byte-identical
// copies of one freshly built pmjail differed by 0.85 ms an `exec
// /usr/bin/true`, and by nothing once both were read back like this.
func (b *Bench) settleBinaries() error {
	paths := []string{b.Pmjail, b.Deno, "/usr/bin/true"}
	for _, sibling := range []string{jail.InitBinaryName, "pmjail-serve"} {
		paths = append(paths, filepath.Join(filepath.Dir(b.Pmjail), sibling))
	}
	if bwrap, err := exec.LookPath("bwrap"); err == nil {
		paths = append(paths, bwrap)
	}
	for _, p := range paths {
		if err := settle(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("settle %s in the page cache: %w", p, err)
		}
	}
	return nil
}

func settle(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Dirty pages (a binary just linked) cannot be dropped until written.
	if err := f.Sync(); err != nil {
		return err
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, f)
	return err
}
