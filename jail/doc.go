// Package jail turns a resolved job into a running, contained child and
// reports how it ended.
//
// Run allocates the job's unprivileged ids, starts the init stage (package
// initstage: the pmjail-init binary, or pmjail's own in its init role)
// inside new user, pid, mount, net, ipc, uts and cgroup namespaces and the
// job's cgroup, hands it the job's configuration over a control socket,
// follows the set-up to the runtime's exec, and then enforces the wall
// timeout, the CPU-time and output limits, kills the whole tree and cleans
// up. The job's files exist only on tmpfs inside the job's own mount
// namespace, so even a supervisor killed with SIGKILL leaves nothing on the
// host's disk.
//
// The job's cgroup has one owner, the jail: Run makes it through the
// job's Cgroups, or adopts the one a pooled child waits with, places the
// child in it, kills through it and reads its usage back; the Outcome
// holds it until Release removes it.
//
// A Pool (the daemon's) keeps init stages started ahead of their runs,
// waiting for a configuration; Run takes one when the job's cgroup allows.
package jail
