// Package profiles holds pmjail's built-in hardening profiles as data —
// limits, mounts and seccomp policies — with their loader and validation.
//
// Seccomp policies are OCI runtime-spec LinuxSeccomp documents embedded from
// profiles/seccomp/*.json: "deno" (Deno running JavaScript and TypeScript),
// "pyodide" (Deno running Pyodide) and "native" (a dynamic glibc program
// under `pmjail exec`). SECCOMP.md says how their allowlists were derived;
// trace-syscalls.sh re-derives them for a new runtime version.
package profiles
