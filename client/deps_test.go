package client

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// The client is for programs of any platform: no package under it needs
// cgo (the standard library's net and runtime/cgo use it only when it is
// there), and it pulls in no part of the engine, only the contract.
func TestClientDependsOnAPIAlone(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	const module = "github.com/pmjail/pmjail"
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf("go list: %q", sc.Text())
		}
		path, std, cgo := f[0], f[1] == "true", f[2]
		seen++
		if !std && cgo != "0" {
			t.Errorf("%s has cgo files", path)
		}
		if strings.HasPrefix(path, module+"/") && path != module+"/client" && path != module+"/api" {
			t.Errorf("client depends on %s: only %s/api may be imported", path, module)
		}
	}
	if seen < 2 {
		t.Fatalf("go list listed %d packages:\n%s", seen, out)
	}
}
