// Package spawn starts the init stage: the one place of pmjail that holds
// cgo, assembly and code that changes a single OS thread's credentials.
//
// Start takes an exec.Cmd whose SysProcAttr is the whole contract of the
// start (namespaces, id mappings, credentials, session, parent-death
// signal, the cgroup to be born in) and starts it in one of two ways. On
// linux/amd64 with cgo, a child in a new user namespace is cloned sharing
// the supervisor's memory until it execs (CLONE_VM), which spares the copy
// of the supervisor's page tables that Go's own start makes for a child
// that must wait for its id mappings; elsewhere, and where clone3 is
// refused, Go's start does it. Either way the start runs on a locked OS
// thread whose effective uid is, for the clone only, the host id the new
// user namespace's root maps to, so that the namespace is owned, and its
// per-user budgets charged, by that id rather than by host root.
package spawn
