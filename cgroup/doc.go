// Package cgroup owns the per-job control groups of pmjail: probing which
// cgroup mechanic the host offers (v1 legacy/hybrid or v2 unified) and
// proving it writable, creating one cgroup per job beneath the supervisor's
// own cgroup with memory (no swap), pids and CPU limits from an OCI
// runtime-spec LinuxResources, reading the job's usage (peak memory, CPU
// time, pids, OOM kills, limit hits), killing the job's whole process tree,
// removing the cgroup, and sweeping the job cgroups of dead supervisors.
//
// The library github.com/containerd/cgroups/v3 handles each job through
// its cgroup1 or cgroup2 manager: writing limits, placing processes,
// listing a busy job's processes and v2's cgroup.kill. What is particular
// to one version lives in job_v1_linux.go or job_v2_linux.go. Usage reads,
// the ended-job check, freezing and removal are done here, each saying
// why: they are on every run's path (the supervisor polls CPU time, and
// reads usage, confirms the job empty and removes it after each run),
// where the library opens every file through os.File (see readFile) and
// reads many more than they need, and its freeze and delete are unbounded
// or fixed where ours keep a deadline.
package cgroup
