package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3"
)

const (
	procSelfCgroup = "/proc/self/cgroup"
	procMountinfo  = "/proc/self/mountinfo"
	unifiedPoint   = "/sys/fs/cgroup"
)

// v1Controllers are the v1 controllers pmjail uses, in report order.
var v1Controllers = []string{Memory, Pids, CPU, CPUAcct, Freezer}

// v2Controllers are the v2 controllers enabled for job cgroups.
var v2Controllers = []string{Memory, Pids, CPU}

// Files whose presence in a (child) cgroup tells what the host offers.
const (
	swapFileV1   = "memory.memsw.limit_in_bytes" // v1 swap accounting
	swapFileV2   = "memory.swap.max"             // v2 swap accounting
	killFileV2   = "cgroup.kill"                 // Linux 5.14+
	freezeFileV2 = "cgroup.freeze"               // Linux 5.2+
)

// Probe finds the host's cgroup mode and the controllers usable beneath
// this process's own cgroup, proving each writable by creating and removing
// a throwaway child cgroup. It never changes the host otherwise. The Host
// is returned even when unusable; the error then wraps ErrNotSupported.
func Probe() (*Host, error) { return probe(true) }

// probe reads the layout (mountinfo, /proc/self/cgroup) and, with prove,
// tries a throwaway child in each hierarchy. Without prove the Host is the
// layout alone: Controllers are those mounted where this process lives,
// and what only a child cgroup shows (swap accounting, cgroup.kill,
// cgroup.freeze) is left unknown (false).
func probe(prove bool) (*Host, error) {
	f, err := os.Open(procMountinfo)
	if err != nil {
		return &Host{Reason: err.Error()}, fmt.Errorf("probe cgroups: %w", err)
	}
	mounts, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return &Host{Reason: err.Error()}, fmt.Errorf("probe cgroups: %w", err)
	}
	legacy, unified, err := cgroups.ParseCgroupFileUnified(procSelfCgroup)
	if err != nil {
		return &Host{Reason: err.Error()}, fmt.Errorf("probe cgroups: %w", err)
	}
	var h *Host
	switch cgroups.Mode() {
	case cgroups.Unified:
		h = probeV2(mounts, unified, prove)
	case cgroups.Legacy, cgroups.Hybrid:
		h = probeV1(mounts, legacy, prove)
	default:
		h = &Host{Reason: "no cgroup hierarchy mounted at " + unifiedPoint}
	}
	if len(h.Controllers) == 0 {
		h.Mode = Unavailable
		return h, fmt.Errorf("probe cgroups: %s: %w", h.Reason, ErrNotSupported)
	}
	return h, nil
}

func (h *Host) addReason(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if h.Reason == "" {
		h.Reason = msg
	} else {
		h.Reason += "; " + msg
	}
}

// probeName is a throwaway cgroup name in the job format, so that Sweep
// removes it if this process dies between mkdir and rmdir.
func probeName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name, _ := jobName(self(), "probe-"+hex.EncodeToString(b[:]))
	return name
}

// probeChild creates and removes a child cgroup of dir, calling inspect with
// the child's path while it exists.
func probeChild(dir string, inspect func(child string)) error {
	child := filepath.Join(dir, probeName())
	if err := os.Mkdir(child, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", child, err)
	}
	if inspect != nil {
		inspect(child)
	}
	return removeTree(child, time.Now().Add(time.Second))
}

func probeV1(mounts []mount, own map[string]string, prove bool) *Host {
	h := &Host{Mode: V1, Parent: map[string]string{}, v1Root: map[string]string{}}
	for _, c := range v1Controllers {
		p, ok := own[c]
		if !ok {
			h.addReason("%s: not in %s", c, procSelfCgroup)
			continue
		}
		m, ok := findV1Mount(mounts, c)
		if !ok {
			h.addReason("%s: hierarchy not mounted", c)
			continue
		}
		dir, err := cgroupDir(m, p)
		if err != nil {
			h.addReason("%s: %v", c, err)
			continue
		}
		// containerd's cgroup1 finds a controller at <root>/<name>; a
		// combined mount such as cpu,cpuacct needs the usual symlinks.
		root := filepath.Dir(m.Point)
		if !sameFile(filepath.Join(root, c), m.Point) {
			h.addReason("%s: mounted at %s without a %s/%s link", c, m.Point, root, c)
			continue
		}
		if !prove {
			h.Controllers = append(h.Controllers, c)
			h.Parent[c] = dir
			h.v1Root[c] = root
			continue
		}
		swap := false
		err = probeChild(dir, func(child string) {
			swap = exists(filepath.Join(child, swapFileV1))
		})
		if err != nil {
			h.addReason("%s: %v", c, err)
			continue
		}
		if c == Memory {
			h.SwapCapped = swap
			if !swap {
				h.addReason("memory: no memory.memsw.* (swap accounting off): swap not capped")
			}
		}
		h.Controllers = append(h.Controllers, c)
		h.Parent[c] = dir
		h.v1Root[c] = root
	}
	return h
}

// v2OwnDir returns the directory whose children are the jobs: our own
// cgroup, or its parent when we already live in the supervisor leaf.
func v2OwnDir(m mount, unified string) (string, error) {
	dir, err := cgroupDir(m, unified)
	if err != nil {
		return "", err
	}
	if filepath.Base(dir) == leafName {
		dir = filepath.Dir(dir)
	}
	return dir, nil
}

func probeV2(mounts []mount, unified string, prove bool) *Host {
	h := &Host{Mode: V2, Parent: map[string]string{}}
	m, ok := findV2Mount(mounts, unifiedPoint)
	if !ok {
		h.addReason("cgroup2 not mounted at %s", unifiedPoint)
		return h
	}
	dir, err := v2OwnDir(m, unified)
	if err != nil {
		h.addReason("%v", err)
		return h
	}
	avail, err := controllerList(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		h.addReason("%v", err)
		return h
	}
	for _, c := range v2Controllers {
		if avail[c] {
			h.Controllers = append(h.Controllers, c)
		} else {
			h.addReason("%s: not delegated to %s (absent from cgroup.controllers)", c, dir)
		}
	}
	if len(h.Controllers) == 0 {
		return h
	}
	if !prove {
		h.Parent[UnifiedKey] = dir
		return h
	}
	enabled, _ := controllerList(filepath.Join(dir, "cgroup.subtree_control"))
	var freeze bool
	err = probeChild(dir, func(child string) {
		freeze = exists(filepath.Join(child, freezeFileV2))
		h.Kill = exists(filepath.Join(child, killFileV2))
		if enabled[Memory] {
			h.SwapCapped = exists(filepath.Join(child, swapFileV2))
		} else {
			// Our own cgroup shows memory files when its parent
			// delegates memory; the root shows none.
			h.SwapCapped = exists(filepath.Join(dir, swapFileV2))
		}
	})
	if err != nil {
		h.Controllers = nil
		h.addReason("%v", err)
		return h
	}
	if freeze {
		h.Controllers = append(h.Controllers, Freezer)
	}
	if avail[Memory] && !h.SwapCapped {
		h.addReason("memory: no memory.swap.max: swap not capped")
	}
	h.Parent[UnifiedKey] = dir
	return h
}
