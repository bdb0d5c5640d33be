package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Stats reads the job's usage now. It reads only the few files it reports
// (statsV1 and statsV2 say what the library's Stat reads instead), once a
// run, after the job has ended; the CPU-time poll reads CPUTime.
func (j *Group) Stats() (Usage, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.deleted {
		return Usage{}, fmt.Errorf("stats of cgroup %s: deleted", j.name)
	}
	var u Usage
	var err error
	if dir, ok := j.paths[UnifiedKey]; ok {
		err = j.statsV2(dir, &u)
	} else {
		err = j.statsV1(&u)
	}
	if err != nil {
		return Usage{}, fmt.Errorf("stats of cgroup %s: %w", j.name, err)
	}
	return u, nil
}

// reader collects the first error of a series of reads; optional files
// that do not exist read as absent.
type reader struct{ err error }

func (r *reader) single(path string, optional bool) (uint64, bool) {
	if r.err != nil {
		return 0, false
	}
	data, err := readFile(path)
	if err != nil {
		if optional && errors.Is(err, os.ErrNotExist) {
			return 0, false
		}
		r.err = err
		return 0, false
	}
	v, ok, err := parseSingle(string(data))
	if err != nil {
		r.err = fmt.Errorf("%s: %w", path, err)
	}
	return v, ok
}

func (r *reader) keyed(path string, optional bool) map[string]uint64 {
	if r.err != nil {
		return nil
	}
	data, err := readFile(path)
	if err != nil {
		if !(optional && errors.Is(err, os.ErrNotExist)) {
			r.err = err
		}
		return nil
	}
	m, err := parseFlatKeyed(string(data))
	if err != nil {
		r.err = fmt.Errorf("%s: %w", path, err)
	}
	return m
}

// readPids reads the tasks' peak and whether a fork was refused.
func (j *Group) readPids(r *reader, dir string, u *Usage) {
	u.PidsPeak = j.pidsPeakNow(r, dir)
	ev := r.keyed(filepath.Join(dir, "pids.events"), true)
	u.PidsLimitHit = ev["max"] > 0
}

// pidsPeakNow returns pids.peak, or where the kernel keeps none the highest
// pids.current seen so far, this read included.
func (j *Group) pidsPeakNow(r *reader, dir string) uint64 {
	return peakNow(r, &j.pidsPeak, &j.pidsSeen, filepath.Join(dir, "pids.peak"), filepath.Join(dir, "pids.current"))
}

func peakNow(r *reader, kept *peakFile, seen *uint64, peakPath, currentPath string) uint64 {
	if *kept != peakNotKept {
		v, ok := r.single(peakPath, true)
		if ok {
			*kept = peakKept
			return v
		}
		if r.err != nil {
			return 0
		}
		*kept = peakNotKept
	}
	cur, _ := r.single(currentPath, false)
	*seen = max(*seen, cur)
	return *seen
}

// TasksPeak is the most tasks the job has held at once (pids.peak, or the
// highest pids.current seen, this read included): what Stats reports as
// PidsPeak, without the rest of Stats.
func (j *Group) TasksPeak() (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.deleted {
		return 0, fmt.Errorf("tasks of cgroup %s: deleted", j.name)
	}
	dir, ok := j.pidsDir()
	if !ok {
		return 0, fmt.Errorf("tasks of cgroup %s: no pids controller: %w", j.name, ErrNotSupported)
	}
	var r reader
	v := j.pidsPeakNow(&r, dir)
	if r.err != nil {
		return 0, fmt.Errorf("tasks of cgroup %s: %w", j.name, r.err)
	}
	return v, nil
}

// CPUTime reads the CPU time the job's tasks have used, for the jail's
// CPU-time poll. Where the kernel keeps no peak of tasks (pids.peak) or,
// on v2, of memory (memory.peak), it also samples the current value, so
// that Stats reports the highest seen; otherwise it reads one file, where
// a whole Stats would read up to eight every poll.
func (j *Group) CPUTime() (time.Duration, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.deleted {
		return 0, fmt.Errorf("CPU time of cgroup %s: deleted", j.name)
	}
	var r reader
	var cpu time.Duration
	if dir, ok := j.paths[UnifiedKey]; ok {
		cpu = j.cpuTimeV2(&r, dir)
	} else {
		cpu = j.cpuTimeV1(&r)
	}
	if r.err != nil {
		return 0, fmt.Errorf("CPU time of cgroup %s: %w", j.name, r.err)
	}
	return cpu, nil
}
