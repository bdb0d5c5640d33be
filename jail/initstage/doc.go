// Package initstage is a job's init stage: the first code that runs in the
// job's new namespaces. On the thread that will exec the runtime it joins
// the job's cgroups, reads its Config from the supervisor, builds the
// read-only root, drops every privilege, installs the seccomp filter last,
// reports back and execs the runtime.
//
// It is its own package, importing little and no cgo, so that it can be
// its own small static binary (cmd/pmjail-init): that binary starts in a
// fraction of pmjail's time, whose Prometheus metrics, HTTP server and
// libseccomp the init stage never uses, and the init stage's start-up is on
// every run's critical path. pmjail's binary carries it too and serves as
// the init stage where pmjail-init is missing or from another build.
package initstage
