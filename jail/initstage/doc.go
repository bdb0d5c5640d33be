// Package initstage is a job's init stage: the first code that runs in the
// job's new namespaces. On the thread that will exec the runtime it reads
// its Config from the supervisor (one started ahead of its job may first
// get a Premount, and mount the likely root while it waits), mounts the
// root's file systems, joins the job's cgroups when the supervisor's Join
// comes, writes the job's files, makes the root read-only, drops every
// privilege, installs the seccomp filter last, reports back and execs the
// runtime.
//
// The set-up is one ordered table of steps (steps_linux.go), each with the
// Stage a failure of it reports and the Layer it applies; the steps' work
// lives by concern: the root (root_linux.go), the job's cgroup
// (cgroupjoin_linux.go), the guest channel (channel_linux.go), the
// process's privileges and limits (privileges_linux.go), Landlock
// (landlock_linux.go); Main and the runtime's life in main_linux.go.
//
// It is its own package, importing little and no cgo, so that it can be
// its own small static binary (cmd/pmjail-init): that binary starts in a
// fraction of pmjail's time, whose Prometheus metrics, HTTP server and
// libseccomp the init stage never uses, and the init stage's start-up is on
// every run's critical path. pmjail's binary carries it too and serves as
// the init stage where pmjail-init is missing or from another build.
package initstage
