package initstage

import "strconv"

// Stage names the step of a run's set-up that failed: one of the init
// stage's steps (the table in steps_linux.go), or one of the supervisor's
// own around them (package jail). It travels in a Report and in
// jail.Outcome; its text, which starts a failure's message, is what users
// see.
type Stage uint8

// The stages, in the order a run meets them. StageCgroup and StageExec
// are each one step with a half on either side, the supervisor's and the
// init stage's. StageHostMountNS and StageMountNS are two steps that share
// their text, as users' messages always have: the supervisor reading its
// own mount namespace, and the init stage checking that it is elsewhere;
// only the second proves a layer.
const (
	// StageNone is no failure: the set-up, if it ran, went through.
	StageNone Stage = iota

	// The supervisor starts the init stage (jail's startChild, and its
	// pool's premount of one started ahead).
	StageIDs           // lease the job's host ids
	StageControlSocket // the control socket's pair
	StagePlaceholder   // the guest channel's placeholder fd
	StageStdoutPipe
	StageStderrPipe
	StageStart // clone into the job's namespaces: the kernel refused one
	StagePremount

	// The supervisor hands the job over.
	StageHostMountNS // read the supervisor's own mount namespace
	StageGuestOwned  // give the guest's host id the directories it writes
	StageSendConfig
	StageCgroup // make, adopt or enter the job's cgroup (the init stage's join too)
	StageInit   // the init stage ended or broke off without a report

	// The init stage's steps (steps_linux.go).
	StageConfig
	StageMountNS // refuse the host's mount namespace
	StageCapabilities
	StageRoot // the root's tmpfs, its mounts made private, its read-only remount
	// StageBindSource: a bind's source the init stage, unprivileged on
	// the host, could not open: missing, or not readable by others. For
	// pmjail exec's --ro-bind paths that is the job's mistake.
	StageBindSource
	StageMounts
	StageFiles
	StageChannel
	StagePivot
	StageHostname
	StageCgroupNS
	StageRlimits
	StageFDs
	StageLandlock
	StagePrivileges
	StageSeccomp

	// The runtime's start, by the init stage (or the supervisor's read of
	// its report), and the supervisor's wait for the run's end.
	StageExec
	StageWait

	stageEnd
)

var stageNames = [stageEnd]string{
	StageNone:          "",
	StageIDs:           "ids",
	StageControlSocket: "control socket",
	StagePlaceholder:   "fd placeholder",
	StageStdoutPipe:    "stdout pipe",
	StageStderrPipe:    "stderr pipe",
	StageStart:         "start",
	StagePremount:      "premount",
	StageHostMountNS:   "mount namespace",
	StageGuestOwned:    "guest-owned directories",
	StageSendConfig:    "send configuration",
	StageCgroup:        "cgroup",
	StageInit:          "init stage",
	StageConfig:        "config",
	StageMountNS:       "mount namespace",
	StageCapabilities:  "capabilities",
	StageRoot:          "root",
	StageBindSource:    "bind source",
	StageMounts:        "mounts",
	StageFiles:         "files",
	StageChannel:       "channel",
	StagePivot:         "pivot_root",
	StageHostname:      "hostname",
	StageCgroupNS:      "cgroup namespace",
	StageRlimits:       "rlimits",
	StageFDs:           "fds",
	StageLandlock:      "landlock",
	StagePrivileges:    "privileges",
	StageSeccomp:       "seccomp",
	StageExec:          "exec",
	StageWait:          "wait",
}

func (s Stage) String() string {
	if s < stageEnd {
		return stageNames[s]
	}
	return "stage(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText gives a logged stage its text rather than its number.
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Layer is the posture layer a set-up step applies, spelled as package
// posture names it (which initstage cannot import: posture runs jails).
// A failure at a step with a layer is what a host without that layer
// does: the caller may probe the host and run without it. A step whose
// failure no host explains (the job's own files or rlimits, a bind source
// the job named) has none, nor does any step of the supervisor's; "" is
// none.
type Layer string

// The layers of the init stage's steps.
const (
	LayerMountNS      Layer = "mount_namespace"
	LayerUTSNS        Layer = "uts_namespace"
	LayerCgroupNS     Layer = "cgroup_namespace"
	LayerRootfs       Layer = "rootfs"
	LayerLandlock     Layer = "landlock"
	LayerCapabilities Layer = "capabilities"
	LayerSeccomp      Layer = "seccomp"
)

// stageError records which step of the set-up failed, and the layer it
// applies.
type stageError struct {
	stage Stage
	layer Layer
	err   error
}

func (e *stageError) Error() string { return e.stage.String() + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }
