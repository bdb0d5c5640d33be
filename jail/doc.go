// Package jail turns a resolved job into a running, contained child and
// reports how it ended.
//
// The supervisor side (Run) allocates the job's unprivileged ids, starts
// pmjail's own binary again in its init role inside new user, pid, mount,
// net, ipc, uts and cgroup namespaces, places it in the job's cgroup, hands
// it the job's configuration over a control socket, and then enforces the
// wall timeout, the CPU-time and output limits, kills the whole tree and
// cleans up. The init side (Init) builds a minimal read-only root on tmpfs,
// pivots into it, sets the hostname and rlimits, drops every capability and
// id, sets no_new_privs, installs the seccomp filter last and execs the
// runtime. The job's files exist only on tmpfs inside the job's own mount
// namespace, so even a supervisor killed with SIGKILL leaves nothing on the
// host's disk.
package jail
