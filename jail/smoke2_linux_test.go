package jail

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/pmjail/pmjail/runtimes"
)

func TestSmokeDeno(t *testing.T) {
	os.Setenv("PMJAIL_RUNTIME_DIR", "/work/main/node_modules")
	in, err := runtimes.Locate()
	if err != nil {
		t.Fatal(err)
	}
	launch, err := in.Launch(runtimes.Job{Runtime: runtimes.Deno, Source: []byte(`console.log("hello", Deno.version.deno); try { Deno.readTextFileSync("/etc/hostname") } catch (e) { console.log(e.name) }; export default (i) => ({got: i})`), MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := NewSpec(launch, RootLimits{TmpBytes: 16 << 20, OpenFiles: 256, FileBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	ch := func(ctx context.Context, c net.Conn) error {
		body := []byte(`{"type":"start","input":{"a":1}}`)
		var h [4]byte
		binary.BigEndian.PutUint32(h[:], uint32(len(body)))
		c.Write(append(h[:], body...))
		got, _ = io.ReadAll(c)
		return nil
	}
	start := time.Now()
	out := Run(context.Background(), &Job{ID: "t", Spec: spec, Files: launch.Files, Timeout: 10 * time.Second, OutputLimit: 1 << 20, Channel: ch})
	t.Logf("wall %v status %s exit %d msg %s\nstdout:%s\nstderr:%s\nchannel:%q", time.Since(start), out.Status, out.ExitCode, out.Message, out.Stdout, out.Stderr, got)
}
