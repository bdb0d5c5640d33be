// Package cgroup owns the per-job control groups of pmjail: probing which
// cgroup mechanic the host offers (v1 legacy/hybrid or v2 unified) and
// proving it writable, creating one cgroup per job beneath the supervisor's
// own cgroup with memory (no swap), pids and CPU limits from an OCI
// runtime-spec LinuxResources, reading the job's usage (peak memory, CPU
// time, pids, OOM kills, limit hits), killing the job's whole process tree,
// removing the cgroup, and sweeping the job cgroups of dead supervisors.
//
// Limits are written through github.com/containerd/cgroups/v3 (cgroup1 and
// cgroup2). Usage reads, kill and removal are done here on the few files
// they need, without os.File (see readFile), because they are on every
// run's path (the supervisor polls CPU time every 25 ms, and reads usage,
// confirms the job empty and removes it after each run) and the library's
// kill fallback reaps processes that belong to the caller.
package cgroup
