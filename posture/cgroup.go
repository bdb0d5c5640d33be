package posture

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/kfile"
)

type cgroupFacts struct {
	info   Cgroup
	layers []Layer
}

// cgroupLayers reports the cgroup controllers the supervisor's manager
// proved usable (it creates and removes a throwaway cgroup to do so).
func cgroupLayers(opt Options) cgroupFacts {
	var f cgroupFacts
	if opt.Cgroups == nil {
		reason := opt.CgroupReason
		if reason == "" {
			reason = "no cgroup manager"
		}
		f.info = Cgroup{Mechanic: "none", Reason: reason}
		f.layers = noCgroupLayers(reason)
		return f
	}
	h := opt.Cgroups.Host()
	f.info = Cgroup{Mechanic: h.Mode.String(), Paths: h.Parent, Reason: h.Reason}
	for _, c := range []struct{ layer, ctl string }{{CgroupMemory, cgroup.Memory}, {CgroupPids, cgroup.Pids}, {CgroupCPU, cgroup.CPU}} {
		if h.Has(c.ctl) {
			detail := fmt.Sprintf("%s controller, job cgroups beneath %s", h.Mode, parentOf(h, c.ctl))
			if c.ctl == cgroup.Memory && !h.SwapCapped {
				detail += "; swap not capped on this host"
			}
			f.layers = append(f.layers, Layer{Name: c.layer, State: Applied, Detail: detail})
		} else {
			f.layers = append(f.layers, Layer{Name: c.layer, State: Missing, Detail: "controller unavailable: " + h.Reason})
		}
	}
	return f
}

func parentOf(h *cgroup.Host, ctl string) string {
	if p, ok := h.Parent[ctl]; ok {
		return p
	}
	return h.Parent[cgroup.UnifiedKey]
}

// noCgroupLayers are the cgroup layers of a host without cgroups: memory,
// tasks and CPU still have weaker bounds.
func noCgroupLayers(reason string) []Layer {
	return []Layer{
		{Name: CgroupMemory, State: Degraded, Detail: "no cgroup (" + reason + "): the V8 heap cap bounds JavaScript memory only"},
		{Name: CgroupPids, State: Degraded, Detail: "no cgroup: RLIMIT_NPROC on the job's own uid bounds its tasks"},
		{Name: CgroupCPU, State: Degraded, Detail: "no cgroup: RLIMIT_CPU bounds CPU time per process, no CPU quota"},
	}
}

// readLimit reads one limit file of a job cgroup, for the run's posture
// (through a bare fd: package kfile says why).
func readLimit(dir, file string) string {
	data, err := kfile.Read(filepath.Join(dir, file))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(data))
}
