package integration

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/queue"
)

// natsNode is one nats-server process of a test's cluster.
type natsNode struct {
	cmd  *exec.Cmd
	url  string
	logs *lockedBuffer
	done chan struct{}
}

// freePorts are n loopback ports free now.
func freePorts(t *testing.T, n int) []int {
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// buildNATS builds nats-server from its Go module into dir.
func buildNATS(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "nats-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	return bin
}

// startNATSNode starts one nats-server, built from its Go module, as a
// JetStream server of its own on loopback.
func startNATSNode(t *testing.T) *natsNode {
	t.Helper()
	dir := outsideTmpDir(t, "itest-nats-")
	bin := buildNATS(t, dir)
	port := freePorts(t, 1)[0]
	n := &natsNode{url: fmt.Sprintf("nats://127.0.0.1:%d", port), logs: &lockedBuffer{}, done: make(chan struct{})}
	n.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", itoa(port), "-js", "-sd", filepath.Join(dir, "js"))
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
	})
	return n
}

// startNATSCluster builds nats-server from its Go module and starts a
// three-node JetStream cluster on loopback.
func startNATSCluster(t *testing.T) []*natsNode {
	t.Helper()
	dir := outsideTmpDir(t, "itest-nats-")
	bin := buildNATS(t, dir)
	ports := freePorts(t, 6)
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+i]))
	}
	var nodes []*natsNode
	for i := range 3 {
		n := &natsNode{url: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), logs: &lockedBuffer{}, done: make(chan struct{})}
		n.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", itoa(ports[i]), "-n", fmt.Sprintf("n%d", i),
			"-js", "-sd", filepath.Join(dir, fmt.Sprintf("n%d", i)),
			"--cluster_name", "pmjail", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = n.cmd.Wait(); close(n.done) }()
		t.Cleanup(func() {
			_ = n.cmd.Process.Kill()
			<-n.done
		})
		nodes = append(nodes, n)
	}
	return nodes
}

func natsURLs(nodes []*natsNode) []string {
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.url)
	}
	return urls
}

// TestQueueNATSCluster: three pmjail workers against a three-node
// JetStream cluster take 300 jobs; one worker and one NATS node are
// SIGKILLed mid-load. Every job has exactly one result, stored once, and
// no worker leaves anything behind.
func TestQueueNATSCluster(t *testing.T) {
	const jobs = 300
	before := snapshotHost(t)
	nodes := startNATSCluster(t)
	cfg := queue.Config{URLs: natsURLs(nodes)}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The cluster elects its meta leader in a moment: provision once it has.
	pctx, pcancel := context.WithTimeout(ctx, time.Minute)
	defer pcancel()
	for try := 1; ; try++ {
		// A request sent before the leader exists gets no answer: each
		// try has its own deadline.
		tctx, tcancel := context.WithTimeout(pctx, 2*time.Second)
		err := queue.Provision(tctx, cfg, queue.Layout{Replicas: 3, MaxJobs: 10000, Retention: time.Hour, History: 5})
		tcancel()
		if err == nil {
			break
		}
		if pctx.Err() != nil {
			t.Fatalf("provision, try %d: %v\n%s", try, err, tail(nodes[0].logs.String(), 4000))
		}
		t.Logf("provision, try %d: %v", try, err)
		time.Sleep(200 * time.Millisecond)
	}

	workerCfg := fmt.Sprintf(`{"version": 1, "max_concurrency": 2, "max_queue": 4, "queue": {"nats": {"urls": [%q, %q, %q], "ack_wait": "3s", "concurrency": 2}}}`,
		nodes[0].url, nodes[1].url, nodes[2].url)
	var workers []*daemon
	for range 3 {
		workers = append(workers, startDaemon(t, daemonDir(t), workerCfg))
	}

	c, err := queue.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Count the results as they are stored.
	js, kv, watch := watchResults(ctx, t, strings.Join(cfg.URLs, ","), cfg.Bucket)

	started := time.Now()
	for i := range jobs {
		id := fmt.Sprintf("job-%03d", i)
		if err := c.Submit(ctx, "others", id, &api.Job{Runtime: "deno", Source: fmt.Sprintf("console.log(%q)", id)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	killed := false
	var killedDir string
	var killedPID int
	for len(seen) < jobs {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d results after %v", len(seen), jobs, time.Since(started))
		case e := <-watch.Updates():
			if e == nil {
				continue
			}
			seen[e.Key()]++
		}
		if !killed && len(seen) >= jobs/5 {
			killed = true
			w := workers[0]
			killedDir, killedPID = w.dir, w.pid()
			guests := descendants(killedPID)
			w.kill()
			if err := nodes[1].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-nodes[1].done
			t.Logf("at %d results (%v): SIGKILLed worker %d (%d processes under it) and NATS node n1", len(seen), time.Since(started).Round(time.Millisecond), killedPID, len(guests))
			if living := outliving(guests, 2*time.Second); len(living) > 0 {
				t.Errorf("guest processes %v outlived the SIGKILLed worker by 2s", describePids(living))
			}
		}
	}
	t.Logf("%d results in %v", len(seen), time.Since(started).Round(time.Millisecond))
	// The jobs the killed worker held came to the others after the ack
	// wait (the survivors' logs count the deliveries).
	redelivered := 0
	for _, w := range workers[1:] {
		for _, line := range strings.Split(w.logs.String(), "\n") {
			if strings.Contains(line, `"queue: job done"`) && !strings.Contains(line, `"delivered":1,`) {
				redelivered++
			}
		}
	}
	t.Logf("%d jobs done by the survivors on a second or later delivery", redelivered)
	if redelivered == 0 {
		// Its two slots are busy but for moments while jobs wait.
		t.Errorf("no job of the killed worker was done by another")
	}

	// Exactly the jobs' keys, each stored once, each its own job's output.
	for i := range jobs {
		id := fmt.Sprintf("job-%03d", i)
		key := queue.Key("others", id)
		if seen[key] != 1 {
			t.Errorf("%s: seen %d times", key, seen[key])
		}
		var h []jetstream.KeyValueEntry
		err := untilAnswered(ctx, func(ctx context.Context) (err error) {
			h, err = kv.History(ctx, key)
			return err
		})
		if err != nil || len(h) != 1 {
			t.Errorf("%s: %d values in the bucket (%v), want 1", key, len(h), err)
			continue
		}
		var res *api.Result
		err = untilAnswered(ctx, func(ctx context.Context) (err error) {
			res, err = c.Get(ctx, "others", id)
			return err
		})
		if err != nil || res.Status != api.StatusOK || res.Stdout != id+"\n" || res.ID != id {
			t.Errorf("%s: %+v %v", id, res, err)
		}
	}
	if len(seen) != jobs {
		t.Errorf("%d keys in the bucket, want %d", len(seen), jobs)
	}
	// The stream empties as the acks land: no job is left in it.
	var stream jetstream.Stream
	if err := untilAnswered(ctx, func(ctx context.Context) (err error) {
		stream, err = js.Stream(ctx, cfg.Stream)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for {
		var info *jetstream.StreamInfo
		err := untilAnswered(ctx, func(ctx context.Context) (err error) {
			info, err = stream.Info(ctx)
			return err
		})
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stream not empty: %+v %v", info.State, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A job for a tenant the workers do not have, and one over the
	// ceiling, are refused with a result that says why; neither runs.
	res, err := c.Run(ctx, "nobody", &api.Job{Runtime: "deno", Source: "1"})
	if err != nil || res.Status != api.StatusRefused || res.Error == nil || res.Error.Code != api.CodeForbidden {
		t.Errorf("job of an unknown tenant: %+v %v", res, err)
	}
	res, err = c.Run(ctx, "others", &api.Job{Runtime: "deno", Source: "1", Limits: api.Limits{Memory: 1 << 40}})
	if err != nil || res.Status != api.StatusRefused || res.Error == nil || res.Error.Code != api.CodeInvalidJob || !strings.Contains(res.Error.Message, "memory") {
		t.Errorf("job over the ceiling: %+v %v", res, err)
	}

	// The CLI submits and waits as the Go client does; the same id sent
	// again gets the stored result, not a second run.
	for range 2 {
		inv := pmjailCmd(t, `console.log("from the cli")`, "submit", "--nats", strings.Join(cfg.URLs, ","),
			"--id", "cli-1", "--runtime", "deno", "--json", "-")
		if inv.ExitCode != 0 || inv.Result == nil || inv.Result.Stdout != "from the cli\n" || inv.Result.ID != "cli-1" {
			t.Errorf("pmjail submit --nats: exit %d, %+v, stderr %s", inv.ExitCode, inv.Result, inv.Stderr)
		}
	}
	if h, err := kv.History(ctx, queue.Key("others", "cli-1")); err != nil || len(h) != 1 {
		t.Errorf("cli-1: %d values in the bucket (%v), want 1", len(h), err)
	}

	// The killed worker's cgroups are swept by the worker started in its
	// place; then every worker stops clean.
	if left := jobCgroups(killedPID); len(left) > 0 {
		t.Logf("the SIGKILLed worker left %d cgroup dirs, to be swept", len(left))
	}
	workers[0] = startDaemon(t, killedDir, workerCfg)
	if left := jobCgroups(killedPID); len(left) > 0 {
		t.Errorf("cgroups of the killed worker left after its replacement started: %v", left)
	}
	for _, w := range workers {
		pid := w.pid()
		w.stop(t)
		if left := jobCgroups(pid); len(left) > 0 {
			t.Errorf("worker %d left cgroups: %v", pid, left)
		}
	}
	assertNothingLeft(t, before)
	if t.Failed() {
		for i, w := range workers {
			t.Logf("worker %d log:\n%s", i, tail(w.logs.String(), 3000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// untilAnswered tries call, each try with its own deadline, until it
// returns before its own deadline or ctx ends. A request the
// cluster got while it re-formed around a killed node can go unanswered
// (the JetStream API's requests are not retried by the client): a new
// request is routed to the nodes that are there.
func untilAnswered(ctx context.Context, call func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := call(tctx)
		expired := tctx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !expired {
			return err
		}
	}
}

// watchResults connects to the NATS servers at urls (riding out a node's
// loss) and watches the result bucket, as results are stored, until the
// test ends.
func watchResults(ctx context.Context, t *testing.T, urls, bucket string, opts ...jetstream.WatchOpt) (jetstream.JetStream, jetstream.KeyValue, jetstream.KeyWatcher) {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := kv.WatchAll(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Stop() })
	return js, kv, watch
}
