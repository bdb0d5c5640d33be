package jail

import (
	"context"
	"testing"
	"time"

	"github.com/pmjail/pmjail/runtimes"
)

func TestSmokeNative(t *testing.T) {
	launch := &runtimes.Launch{Program: "/bin/sh", Args: []string{"sh", "-c", "echo hi; id; hostname; ls /; cat /proc/self/status | grep -E 'Cap|NoNew|Secc'; ls /proc; echo x > /tmp/x && cat /tmp/x; touch /foo; exit 3"}, Env: []string{"PATH=/bin"}}
	launch.Binds = append(launch.Binds, runtimes.Bind{Source: "/usr/bin", Target: "/usr/bin"})
	spec, err := NewSpec(launch, RootLimits{TmpBytes: 1 << 20, OpenFiles: 64, FileBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	out := Run(context.Background(), &Job{ID: "t", Spec: spec, Timeout: 5 * time.Second, OutputLimit: 1 << 20})
	t.Logf("%+v\nstdout:%s\nstderr:%s", out, out.Stdout, out.Stderr)
	t.Logf("observed %+v", out.Observed)
}
