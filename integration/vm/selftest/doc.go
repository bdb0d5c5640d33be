// Command selftest proves that the VM built by integration/vm/run.sh is the
// host pmjail's cgroup v2 code expects: a pure cgroup2 hierarchy with the
// memory, pids and cpu controllers, a memory limit that OOM-kills a child
// started straight into its cgroup (CLONE_INTO_CGROUP), the delegation rule a
// supervisor in a non-root cgroup must follow, the namespaces a jail creates,
// seccomp and Landlock, and a dynamically linked program (Deno) running.
//
// It prints one PASS or FAIL line per check and exits 1 if any failed. It is
// built static (CGO_ENABLED=0) so the VM needs no libraries for it:
//
//	CGO_ENABLED=0 go build -o /tmp/vm-selftest ./integration/vm/selftest
//	integration/vm/run.sh -x node_modules/@deno/linux-x64-glibc/deno /tmp/vm-selftest
//
// It must run as root on a cgroup v2 host it may change; it removes the
// cgroups it creates.
package main
