package posture

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeHost builds probe results: every layer applied except those named.
func fakeHost(incomplete string, missing ...string) *Probed {
	p := &Probed{At: time.Now().UTC(), Incomplete: incomplete, Cgroup: Cgroup{Mechanic: "v2"}}
	for _, name := range Names {
		st, detail := Applied, "proven"
		for _, m := range missing {
			if m == name {
				st, detail = Missing, "not proven"
			}
		}
		p.Layers = append(p.Layers, Layer{Name: name, State: st, Core: isCore(name), Detail: detail})
	}
	return p
}

func wantApplied(t *testing.T, p *Probed, names ...string) {
	t.Helper()
	for _, n := range names {
		if !p.Has(n) {
			t.Errorf("%s is not applied: %+v", n, p.Layers)
		}
	}
}

// A probe that fails or is cut short never turns a proven layer missing,
// and says so in a note; a probe may still prove what was not proven.
func TestProberKeepsProvenLayers(t *testing.T) {
	results := []*Probed{
		fakeHost("", Landlock),
		fakeHost("the probe jail failed: run cancelled: context canceled", Rootfs, Seccomp, NoNewPrivs, Capabilities, Rlimits, Landlock),
		fakeHost("", MountNS, Seccomp, CgroupMemory),
		fakeHost(""),
	}
	var calls atomic.Int32
	pr := newProber(func(context.Context) *Probed { return results[calls.Add(1)-1] }, nil)
	defer pr.Close()

	first := pr.Get(context.Background())
	wantApplied(t, first, Core...)
	if first.Has(Landlock) {
		t.Error("landlock applied although the first probe did not prove it")
	}
	failed, err := pr.Refresh(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantApplied(t, failed, Core...)
	wantApplied(t, failed, Rlimits)
	if failed.Has(Landlock) {
		t.Error("landlock became applied without a probe proving it")
	}
	if r := failed.Report("required", nil); r.Decision != "run" {
		t.Errorf("mode required after a failed probe: %s, missing %v", r.Decision, r.Missing)
	}
	notes := strings.Join(failed.Report("auto", nil).Notes, "\n")
	for _, want := range []string{"did not finish", Rootfs + ": kept", Seccomp + ": kept", Capabilities + ": kept"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the notes lack %q:\n%s", want, notes)
		}
	}
	// A probe that finished and still did not prove a layer: kept too.
	kept, err := pr.Refresh(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantApplied(t, kept, MountNS, Seccomp, CgroupMemory)
	if kept.Cgroup.Mechanic != "v2" {
		t.Errorf("cgroup %+v", kept.Cgroup)
	}
	proved, err := pr.Refresh(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantApplied(t, proved, Names[:len(Names)-1]...)
	if len(proved.Notes) != 0 {
		t.Errorf("notes after a probe that proved everything: %q", proved.Notes)
	}
}

// A caller that gives up stops waiting, not the probe: it runs on a
// context of its own (with its own deadline), and its result is kept.
func TestProberCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	probeErr := make(chan error, 1)
	probing := make(chan struct{}) // the second probe has started
	var calls atomic.Int32
	pr := newProber(func(ctx context.Context) *Probed {
		if calls.Add(1) == 1 {
			return fakeHost("")
		}
		close(probing)
		<-release
		if _, ok := ctx.Deadline(); !ok {
			probeErr <- errors.New("the probe has no deadline of its own")
		}
		probeErr <- ctx.Err()
		return fakeHost("")
	}, nil)
	defer pr.Close()
	pr.Get(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := pr.Refresh(ctx, time.Now()); done <- err }()
	<-probing
	idle := pr.Idle()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a refresh whose caller gave up: %v, want context.Canceled", err)
	}
	select {
	case <-idle:
		t.Fatal("the probe ended with its caller")
	default:
	}
	close(release)
	if err := <-probeErr; err != nil {
		t.Fatalf("the probe's context after its caller gave up: %v", err)
	}
	<-idle
	wantApplied(t, pr.Get(context.Background()), Core...)
}

// Refreshes at once share one probe.
func TestProberSingleFlight(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	probing := make(chan struct{}, 8) // a probe after the first has started
	pr := newProber(func(context.Context) *Probed {
		if calls.Add(1) > 1 {
			probing <- struct{}{}
			<-release
		}
		return fakeHost("")
	}, nil)
	defer pr.Close()
	pr.Get(context.Background())

	since := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := pr.Refresh(context.Background(), since); err != nil {
				t.Error(err)
			}
		})
	}
	<-probing
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 2 {
		t.Errorf("eight refreshes at once ran %d probes after the first, want 1", n-1)
	}
	// A refresh asked before the last probe ended is answered by it.
	if _, err := pr.Refresh(context.Background(), since); err != nil || calls.Load() != 2 {
		t.Errorf("a refresh older than the last probe probed again (%d probes): %v", calls.Load(), err)
	}
}

// A first probe that cannot finish proves nothing: mode required refuses
// until a later probe proves the core.
func TestProberFirstProbeFails(t *testing.T) {
	var calls atomic.Int32
	pr := newProber(func(context.Context) *Probed {
		if calls.Add(1) == 1 {
			return fakeHost("the probe jail failed: timeout", Rootfs, Seccomp, NoNewPrivs, Capabilities, Rlimits)
		}
		return fakeHost("")
	}, nil)
	defer pr.Close()
	if r := pr.Get(context.Background()).Report("required", nil); r.Decision != "refuse" || len(r.Missing) != 4 {
		t.Errorf("mode required after a first probe that failed: %s, missing %v", r.Decision, r.Missing)
	}
	pr.mu.Lock()
	retrying := pr.retry != nil && pr.backoff == firstRetry
	pr.mu.Unlock()
	if !retrying {
		t.Error("no probe again scheduled after a first probe that could not finish")
	}
	p, err := pr.Refresh(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Report("required", nil); r.Decision != "run" {
		t.Errorf("mode required after a probe that proved the core: %s, missing %v", r.Decision, r.Missing)
	}
}

// A caller that gives up before any probe ended gets nothing proven.
func TestProberGetBeforeFirstProbe(t *testing.T) {
	release := make(chan struct{})
	pr := newProber(func(context.Context) *Probed { <-release; return fakeHost("") }, nil)
	defer pr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := pr.Get(ctx).Report("required", nil); r.Decision != "refuse" {
		t.Errorf("mode required with no probe finished: %s", r.Decision)
	}
	close(release)
	<-pr.Idle()
	wantApplied(t, pr.Get(context.Background()), Core...)
}
