package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Stats reads the job's usage now. It reads only the few files it reports
// (the library's Stat parses every controller's full statistics), because
// the supervisor calls it every ~50 ms to enforce the CPU-time limit.
func (j *Job) Stats() (Usage, error) {
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
	data, err := os.ReadFile(path)
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
	data, err := os.ReadFile(path)
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

func (j *Job) statsV1(u *Usage) error {
	var r reader
	if dir, ok := j.paths[Memory]; ok {
		u.MemoryPeakBytes, _ = r.single(filepath.Join(dir, "memory.max_usage_in_bytes"), false)
		fail, _ := r.single(filepath.Join(dir, "memory.failcnt"), false)
		swfail, _ := r.single(filepath.Join(dir, "memory.memsw.failcnt"), true)
		oom := r.keyed(filepath.Join(dir, "memory.oom_control"), false)
		u.OOMKills = oom["oom_kill"]
		u.MemoryLimitHit = fail > 0 || swfail > 0 || u.OOMKills > 0
	}
	if dir, ok := j.paths[CPUAcct]; ok {
		ns, _ := r.single(filepath.Join(dir, "cpuacct.usage"), false)
		u.CPUTime = time.Duration(ns)
	}
	if dir, ok := j.paths[Pids]; ok {
		j.readPids(&r, dir, u)
	}
	return r.err
}

func (j *Job) statsV2(dir string, u *Usage) error {
	var r reader
	h := j.m.host
	if h.Has(Memory) {
		peak, ok := r.single(filepath.Join(dir, "memory.peak"), true)
		if !ok {
			cur, _ := r.single(filepath.Join(dir, "memory.current"), false)
			j.memSeen = max(j.memSeen, cur)
			peak = j.memSeen
		}
		u.MemoryPeakBytes = peak
		ev := r.keyed(filepath.Join(dir, "memory.events"), false)
		u.OOMKills = ev["oom_kill"]
		u.MemoryLimitHit = ev["max"] > 0 || ev["oom"] > 0 || ev["oom_kill"] > 0
	}
	// cpu.stat is a core file: present without the cpu controller.
	cs := r.keyed(filepath.Join(dir, "cpu.stat"), false)
	u.CPUTime = time.Duration(cs["usage_usec"]) * time.Microsecond
	if h.Has(Pids) {
		j.readPids(&r, dir, u)
	}
	return r.err
}

func (j *Job) readPids(r *reader, dir string, u *Usage) {
	u.PidsCurrent, _ = r.single(filepath.Join(dir, "pids.current"), false)
	peak, ok := r.single(filepath.Join(dir, "pids.peak"), true)
	if !ok {
		j.pidsSeen = max(j.pidsSeen, u.PidsCurrent)
		peak = j.pidsSeen
	}
	u.PidsPeak = peak
	ev := r.keyed(filepath.Join(dir, "pids.events"), true)
	u.PidsLimitHit = ev["max"] > 0
}
