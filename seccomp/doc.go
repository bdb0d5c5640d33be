// Package seccomp turns an OCI runtime-spec LinuxSeccomp policy into a
// classic BPF program and, on the supervisor side, serves its user
// notifications.
//
// The work is split along the process boundary. Compile runs in the
// supervisor with libseccomp (cgo) and yields a bpf.Program: plain BPF plus
// a few flags, serialisable with MarshalBinary so it can be sent to the
// child. bpf.Install runs in the child's init stage, after
// PR_SET_NO_NEW_PRIVS and just before execve, with a raw seccomp(2) call
// and no cgo (package bpf links no libseccomp, so the init stage does not
// either). When the program asks for notification, Install returns the
// listener fd; the child passes it to the supervisor, whose Serve names
// every denied syscall and answers with the profile's errno.
//
// A build without cgo links no libseccomp and has no compiler: Compile and
// CheckSyscall return ErrNoCompiler, a run that asks for a filter fails,
// and the posture reports the seccomp layer missing.
//
// Compile enforces a fixed set of dangerous calls (ptrace, mount, unshare,
// namespace flags to clone, bpf, io_uring, TIOCSTI, ...) whatever the policy
// says, unless the operator lists them in Options.AllowDangerous; clone3
// always fails with ENOSYS so that glibc falls back to clone, whose flags a
// filter can inspect. Only the native architecture is accepted: x32 and i386
// entry points are refused.
//
// Cache keeps compiled programs on disk, so that a one-shot supervisor skips
// decoding and compiling a policy it has compiled before; an entry is used
// only when nothing but the effective uid could have written it.
package seccomp
