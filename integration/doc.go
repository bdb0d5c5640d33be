// Package integration holds pmjail's end-to-end and security suites. They
// run the real pmjail binary against real Deno and Pyodide, as root, and
// assert the specific outcome of each attempt: which status, which error.
//
// The binary is built once per test run (or taken from $PMJAIL_BIN, as in
// the cgroup v2 VM, which has no Go toolchain); the runtimes come from
// $PMJAIL_RUNTIME_DIR or the checkout's node_modules.
package integration
