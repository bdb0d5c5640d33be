// Package integration holds pmjail's end-to-end and security suites. They
// run the real pmjail binary against real Deno and Pyodide, as root, and
// assert the specific outcome of each attempt: which status, which error.
//
// The binary is taken from $PMJAIL_BIN — `make test` passes the pmjail
// `make build` made, with its pmjail-serve and pmjail-init beside it, here
// and in the cgroup v2 VM, which has no Go toolchain — or else built once
// per test run with its pmjail-serve (then it is its own init stage); the
// runtimes come from
// $PMJAIL_RUNTIME_DIR or the checkout's node_modules.
package integration
