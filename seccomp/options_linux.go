package seccomp

import "errors"

// ErrNoCompiler means this pmjail was built without cgo, so without
// libseccomp: it cannot compile a policy, and a run that asks for a filter
// fails rather than go without (the posture reports the layer missing).
var ErrNoCompiler = errors.New("seccomp: no compiler: pmjail was built without cgo (libseccomp)")

// Options are the operator's choices that a profile cannot override.
type Options struct {
	// AllowDangerous names dangerous calls (see DangerousSyscalls) the
	// operator explicitly allows; every other one stays denied even when
	// the profile allows it.
	AllowDangerous []string
	// Log is development mode: what the profile denies is logged
	// (SCMP_ACT_LOG) and let through. Dangerous calls stay denied. Never
	// the default.
	Log bool
	// Notify turns denials into user notifications so the supervisor can
	// name each denied syscall (Serve), answering with the profile's errno.
	Notify bool
}
