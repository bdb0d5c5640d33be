package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/pmjail/pmjail/runtimes"
)

// ensureSnapshot makes sure pmjail's Python starts from its memory
// snapshot, as it does after `make setup`: through `pmjail prepare` when
// the binary has it, else by building the snapshot the way pmjail would.
// It returns how the next Python run starts.
func (b *Bench) ensureSnapshot(ctx context.Context) (string, error) {
	in, err := runtimes.Locate() // PMJAIL_RUNTIME_DIR is set: the same install pmjail uses
	if err != nil {
		return "", err
	}
	if in.PythonStart() == "snapshot" {
		return "snapshot", nil
	}
	if strings.Contains(commandsOf(b.Pmjail), "pmjail prepare") {
		cmd := exec.CommandContext(ctx, b.Pmjail, "prepare")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("pmjail prepare: %w", err)
		}
	} else {
		b.Report.Note("`pmjail prepare` is not in this build: the bench built the Pyodide snapshot itself (runtimes.EnsurePyodideSnapshot)")
		if _, err := in.EnsurePyodideSnapshot(ctx); err != nil {
			return "", fmt.Errorf("build the Pyodide snapshot: %w", err)
		}
	}
	return in.PythonStart(), nil
}

// commandsOf is the usage text pmjail prints on stderr when given no command.
func commandsOf(bin string) string {
	out, _ := exec.Command(bin).CombinedOutput()
	return string(out)
}
