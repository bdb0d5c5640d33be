// Package job owns the contract's job object and its journey to a result:
// decoding and validating a request (from the CLI or the socket API),
// resolving it against a hardening profile and the operator's ceiling,
// deciding with the host's posture whether and how it may run, and running
// it through every layer — cgroup, jail, seccomp, broker — into one Result.
package job
