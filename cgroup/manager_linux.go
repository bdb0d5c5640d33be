package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Manager creates job cgroups beneath the supervisor's own cgroup.
type Manager struct {
	host *Host
	// own is this process, whose start time goes into its cgroups' names.
	own owner
	// lazy: host is the layout alone (NewLazyManager), proven by nothing
	// but the job cgroups Create makes.
	lazy bool
}

// NewManager probes the host and prepares job creation. On v2 it enables
// memory, pids and cpu for the children of our own cgroup; when the kernel
// refuses because our cgroup holds processes (the no internal process
// rule), it first moves every process of our cgroup into the leaf
// "<own>/pmjail-supervisor", as systemd's Delegate=yes expects. The error
// wraps ErrNotSupported when cgroups cannot be used.
func NewManager() (*Manager, error) {
	h, err := Probe()
	if err != nil {
		return nil, err
	}
	if h.Mode == V2 {
		if err := enableV2(h); err != nil {
			return nil, err
		}
		if len(h.Controllers) == 0 {
			return nil, fmt.Errorf("cgroup manager: %s: %w", h.Reason, ErrNotSupported)
		}
	}
	return &Manager{host: h, own: self()}, nil
}

// NewLazyManager prepares job creation from the host's cgroup layout
// alone (mountinfo and /proc/self/cgroup), writing nothing: no throwaway
// child is made and removed in each hierarchy, as NewManager's probe does.
// It is for a supervisor that creates one job, the CLI: that job's own
// cgroup is the proof. Create then fails with an error wrapping
// ErrNotSupported for a hierarchy that refuses a cgroup, as the probe
// would have found, and Probed returns a proven Manager to retry with.
// What only a cgroup shows (swap accounting, cgroup.kill, cgroup.freeze)
// each job learns from its own directories, so a lazy Manager's Host
// leaves SwapCapped and Kill false. On a v2 host whose controllers are not
// yet enabled for our children it is NewManager, which enables them.
func NewLazyManager() (*Manager, error) {
	h, err := probe(false)
	if err != nil {
		return nil, err
	}
	if h.Mode == V2 {
		on, err := controllerList(filepath.Join(h.Parent[UnifiedKey], "cgroup.subtree_control"))
		if err != nil {
			return NewManager()
		}
		for _, c := range h.Controllers {
			if !on[c] {
				return NewManager()
			}
		}
	}
	return &Manager{host: h, own: self(), lazy: true}, nil
}

// Probed returns a Manager whose Host the probe proved: m itself, or for a
// lazy Manager a new one from NewManager, as a run whose cgroup could not
// be made needs to learn which controllers are usable.
func (m *Manager) Probed() (*Manager, error) {
	if !m.lazy {
		return m, nil
	}
	return NewManager()
}

// Host returns what the probe proved, as the Manager uses it; for a lazy
// Manager, the layout (see NewLazyManager).
func (m *Manager) Host() *Host { return m.host }

// enableV2 enables the job controllers in <own>/cgroup.subtree_control,
// one at a time so that one refused controller does not cost the others
// (cgroup2's ToggleControllers writes them all in one write).
func enableV2(h *Host) error {
	dir := h.Parent[UnifiedKey]
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	var kept []string
	for _, c := range h.Controllers {
		if c == Freezer {
			kept = append(kept, c)
			continue
		}
		err := enableOne(dir, ctl, c)
		if err != nil {
			if errors.Is(err, ErrNotSupported) {
				h.addReason("%s: %v", c, err)
				continue
			}
			return err
		}
		kept = append(kept, c)
	}
	h.Controllers = kept
	if !h.Has(Memory) {
		h.SwapCapped = false
		return nil
	}
	// Now that memory is on for children, a child shows whether swap
	// accounting exists.
	err := probeChild(dir, func(child string) {
		h.SwapCapped = exists(filepath.Join(child, swapFileV2))
	})
	if err != nil {
		return fmt.Errorf("cgroup manager: %w", err)
	}
	return nil
}

func enableOne(dir, ctl, c string) error {
	for attempt := 0; attempt < 6; attempt++ {
		on, err := controllerList(ctl)
		if err != nil {
			return fmt.Errorf("cgroup manager: %w", err)
		}
		if on[c] {
			return nil
		}
		err = writeString(ctl, "+"+c)
		if err == nil {
			continue // re-read to confirm
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("%w: %w", err, ErrNotSupported)
		}
		if err := evacuate(dir); err != nil {
			return err
		}
	}
	return fmt.Errorf("enable %s in %s: still off after retries: %w", c, ctl, ErrNotSupported)
}

// evacuate moves every process of dir into dir/pmjail-supervisor, retrying
// while processes keep appearing (forks racing with the move). Not
// cgroup2's MoveTo: it lists recursively, so it would move the jobs'
// tasks out of their cgroups too.
func evacuate(dir string) error {
	leaf := filepath.Join(dir, leafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	for round := 0; round < 20; round++ {
		data, err := readString(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("cgroup manager: %w", err)
		}
		pids, err := parsePids(data)
		if err != nil {
			return fmt.Errorf("cgroup manager: %s/cgroup.procs: %w", dir, err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			err := writeString(filepath.Join(leaf, "cgroup.procs"), fmt.Sprint(p))
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cgroup manager: move pid %d into %s: %w", p, leaf, err)
			}
		}
	}
	return fmt.Errorf("cgroup manager: processes keep appearing in %s", dir)
}

// Create makes the cgroup of job id with the limits of res (see limitsFrom)
// and returns it empty. It fails with ErrNotSupported when a limit needs a
// controller the host lacks.
func (m *Manager) Create(id string, res *specs.LinuxResources) (*Group, error) {
	if strings.HasPrefix(id, reservePrefix) {
		return nil, fmt.Errorf("create cgroup: job id %q: %q starts only reserved cgroups' ids", id, reservePrefix)
	}
	name, err := jobName(m.own, id)
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	l, err := limitsFrom(res)
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	for _, c := range l.needs() {
		if !m.host.Has(c) {
			return nil, fmt.Errorf("create cgroup %s: %s controller: %w", name, c, ErrNotSupported)
		}
	}
	if m.host.Mode == V2 {
		return m.createV2(name, l)
	}
	return m.createV1(name, l, false)
}

// Reserve makes a job cgroup without limits, in every controller the host
// has: for an init stage started before its job is known (jail.Pool),
// which waits with it and hands it to the run that takes it. That run
// gives it its limits (SetLimits) before anything of the job's is in it.
// The name, "pmjail-<pid>-@<start>-prestart-<id>", tells it from a job's
// own; Sweep treats it as one.
func (m *Manager) Reserve(id string) (*Group, error) {
	name, err := jobName(m.own, reservePrefix+id)
	if err != nil {
		return nil, fmt.Errorf("reserve cgroup: %w", err)
	}
	if m.host.Mode == V2 {
		return m.createV2(name, limits{})
	}
	return m.createV1(name, limits{}, true)
}

// Sweep removes the job cgroups whose owning supervisor is dead, killing
// their tasks first: its pid is gone, or (in a name with its start time)
// another process has it now. Jobs of a live supervisor, this one
// included, are never touched; a name of an earlier version, without the
// start, is kept while any process has its pid. It returns the names removed. The directories are read
// here: neither cgroup1 nor cgroup2 lists a cgroup's children.
func (m *Manager) Sweep() ([]string, error) {
	found := map[string]map[string]string{} // name -> key -> dir
	for key, parent := range m.host.Parent {
		ents, err := os.ReadDir(parent)
		if err != nil {
			return nil, fmt.Errorf("sweep cgroups in %s: %w", parent, err)
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			if _, ok := ownerOf(e.Name()); !ok {
				continue
			}
			if found[e.Name()] == nil {
				found[e.Name()] = map[string]string{}
			}
			found[e.Name()][key] = filepath.Join(parent, e.Name())
		}
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	var removed []string
	var errs []error
	for _, n := range names {
		if o, _ := ownerOf(n); o == m.own || o.alive() {
			continue
		}
		j := m.newJob(n, found[n])
		if err := m.load(j); err != nil {
			errs = append(errs, fmt.Errorf("sweep: cgroup %s: %w", n, err))
			continue
		}
		if err := j.Delete(); err != nil {
			errs = append(errs, fmt.Errorf("sweep: %w", err))
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

// load gives a job found on disk what it offers and the library's handle
// on it. A v1 job whose every directory went meanwhile needs none: Delete
// finds nothing to remove.
func (m *Manager) load(j *Group) error {
	if m.host.Mode == V2 {
		j.learnV2()
		return m.loadV2(j)
	}
	j.learnV1()
	if err := m.loadV1(j); err != nil && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return err
	}
	return nil
}

// killTimeout bounds Kill and Delete: a task stuck in uninterruptible
// sleep can keep a cgroup busy, and the supervisor must not hang on it.
const killTimeout = 5 * time.Second
