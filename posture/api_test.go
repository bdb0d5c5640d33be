package posture

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/netns"
)

// fullReport returns a report with every member set, so that a member the
// contract's form forgets shows.
func fullReport(t *testing.T) *Report {
	r := &Report{
		Mode: "required", Decision: "refuse", Missing: []string{Landlock},
		Layers: layers(map[string]State{Landlock: Missing, Timing: Off}),
		Cgroup: Cgroup{Mechanic: "v2", Paths: map[string]string{"unified": "/sys/fs/cgroup/x"}, Reason: "r"},
		Host: &Host{Kernel: "6.1", Privileged: true, Sysctls: map[string]string{"k": "v"}, SeccompActions: []string{"log"},
			LandlockABI: 3, Runtimes: []Runtime{{Name: "deno", Version: "2", Path: "/d", Start: "s", Detail: "d"}}},
		Runtime: &RunRuntime{Name: "python", Start: "snapshot"},
		Observed: &jail.Observed{PID: 7, NoNewPrivs: true, Seccomp: 2, SeccompFilters: 1, CapEff: "0", CapPrm: "0",
			CapInh: "0", CapBnd: "0", CapAmb: "0", HostUID: 1, HostGID: 2, Namespaces: map[string]bool{"net": true},
			NamespaceIDs: map[string]uint64{"net": 9}, Cgroups: []string{"0::/x"}, RootReadOnly: true, Mounts: 4,
			CoreLimit: "0", NoFileLimit: "64", Error: "e",
			Network: &netns.Report{Isolated: true, HostInode: 1, JobInode: 2, Interfaces: []netns.Interface{{Name: "lo"}}, Reason: "x"}},
		ProbedAt: time.Unix(5, 0).UTC(),
		Notes:    []string{"n"},
	}
	// Every member of the report is set: a new one must be added here and
	// to API.
	v := reflect.ValueOf(*r)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("fullReport leaves %s unset", v.Type().Field(i).Name)
		}
	}
	return r
}

// A result's full posture is the report's own JSON, member for member (as
// `pmjail posture --json` and GET /v1/posture write it).
func TestAPIFullIsTheReport(t *testing.T) {
	r := fullReport(t)
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, detail := range []string{"", api.PostureFull} {
		got, err := json.Marshal(r.API(detail))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("API(%q):\n got %s\nwant %s", detail, got, want)
		}
	}
}

func TestAPISummary(t *testing.T) {
	r := fullReport(t)
	s := r.API(api.PostureSummary)
	want := &api.Posture{Mode: "required", Decision: "refuse", Missing: []string{Landlock},
		AppliedLayers: slices.DeleteFunc(slices.Clone(Names), func(n string) bool { return n == Landlock || n == Timing })}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	if !s.Applied(Seccomp) || s.Applied(Landlock) {
		t.Error("Applied reads a summary's applied names")
	}
	b, _ := json.Marshal(s)
	var members map[string]json.RawMessage
	_ = json.Unmarshal(b, &members)
	if len(members) != 4 {
		t.Errorf("summary members: %s", b)
	}
}
