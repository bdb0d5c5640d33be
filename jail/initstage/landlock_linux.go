package initstage

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// landlockABIs are go-landlock's configurations by ABI version (index
// v-1): the file system rights, network rights and scopes each version
// handles. landlock.V11.BestEffort() enforces the entry of the running
// kernel's ABI, capped at the newest the library knows; so does
// applyLandlock.
var landlockABIs = [...]landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// The rights go-landlock's RODirs, RWDirs (WithRefer) and RWFiles rules
// grant (its unexported accessFSRead, accessFSReadWrite and
// accessFSReadWrite & accessFile), each then cut to what the ruleset
// handles. A test holds them to the library's.
//
// The writable directories also take Refer (ABI 2 on), which a ruleset
// refuses unless a rule grants it: without it every rename or link into
// another directory fails EXDEV, which breaks extract-then-move, package
// managers and atomic writes into a directory. It widens nothing: a
// rename cannot leave its mount, and Landlock still refuses a move whose
// destination grants the file a right its source did not.
const (
	llFileOnly  = llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSTruncate | llsys.AccessFSReadFile
	llRead      = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
	llWrite     = llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile | llsys.AccessFSMakeChar | llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo | llsys.AccessFSMakeBlock | llsys.AccessFSMakeSym | llsys.AccessFSTruncate
	llReadWrite = llRead | llWrite
	llRWDirs    = llReadWrite | llsys.AccessFSRefer
	llRWFiles   = llReadWrite & llFileOnly
)

// landlockABI is the ABI version go-landlock would enforce here: the
// kernel's, down to 5 where a v6+ kernel lacks the fix for signal scoping
// (erratum 2, as the library's DetectedABIVersion), capped at the newest
// version the library knows.
func landlockABI() (int, error) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, err
	}
	if v < 1 {
		return 0, fmt.Errorf("ABI version %d", v)
	}
	if v >= 6 {
		errata, err := llsys.LandlockGetErrata()
		if err != nil {
			errata = 0
		}
		if errata&0x2 == 0 {
			v = 5
		}
	}
	return min(v, len(landlockABIs)), nil
}

// applyLandlock adds Landlock behind the mount namespace: the root is
// readable, only the writable mounts, the devices (and rwFiles) are
// writable, TCP binds and
// connects are refused, and abstract Unix sockets and signals are scoped to
// the job. It returns the ABI enforced (0 for none) and why, if none.
//
// It builds the ruleset landlock.V11.BestEffort().Restrict would, with the
// RODirs("/"), RWDirs and RWFiles rules, but enforces it on the calling
// thread only. The library enforces on every thread of the process, by a
// signal to each Go runtime thread (psx) below ABI 8, and that round trip
// is most of its cost; only the thread that calls execve needs the domain.
// Main runs the set-up on its locked thread and execs from it, execve ends
// every other thread of the process, and no guest code runs before that.
// The thread gets no_new_privs here, as landlock_restrict_self requires
// (dropCredentials sets it again).
func applyLandlock(mounts []specs.Mount, rwFiles []string) (int, string) {
	abi, err := landlockABI()
	if err != nil {
		return 0, fmt.Sprintf("landlock unavailable: %v", err)
	}
	var rwDirs []string
	for _, m := range mounts {
		switch {
		case m.Type == "bind" && strings.HasPrefix(m.Destination, "/dev/") && (!readOnly(m.Options) || !hasOption(m.Options, "nodev")):
			// A device the jail binds (a bind without nodev): its mount
			// is read-only, which keeps the host's inode as it is, and
			// the device still takes writes.
			rwFiles = append(rwFiles, m.Destination)
		case readOnly(m.Options) || m.Type == "proc":
		default:
			rwDirs = append(rwDirs, m.Destination)
		}
	}
	cfg := landlockABIs[abi-1]
	if err := restrictThread(cfg, []pathRule{{llRead, []string{"/"}}, {llRWDirs, rwDirs}, {llRWFiles, rwFiles}}); err != nil {
		return 0, fmt.Sprintf("landlock restrict: %v", err)
	}
	return abi, ""
}

// pathRule grants access to the file hierarchies below paths.
type pathRule struct {
	access uint64
	paths  []string
}

// restrictThread enforces a ruleset handling cfg's rights and scopes, with
// rules (each cut to the rights cfg handles), on the calling thread.
func restrictThread(cfg landlock.Config, rules []pathRule) error {
	attr := llsys.RulesetAttr{
		HandledAccessFS:  uint64(cfg.HandledAccessFS),
		HandledAccessNet: uint64(cfg.HandledAccessNet),
		Scoped:           uint64(cfg.Scoped),
	}
	fd, err := llsys.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return os.NewSyscallError("landlock_create_ruleset", err)
	}
	defer unix.Close(fd)
	for _, r := range rules {
		access := r.access & attr.HandledAccessFS
		if access == 0 {
			continue
		}
		for _, p := range r.paths {
			if err := addPathRule(fd, p, access); err != nil {
				return fmt.Errorf("populating ruleset for %q with access %v: %w", p, landlock.AccessFSSet(access), err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, 0); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("the maximum number of stacked rulesets is reached: %w", err)
		}
		return os.NewSyscallError("landlock_restrict_self", err)
	}
	return nil
}

func addPathRule(ruleset int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("open", err)
	}
	defer unix.Close(fd)
	attr := llsys.PathBeneathAttr{ParentFd: fd, AllowedAccess: access}
	if err := llsys.LandlockAddPathBeneathRule(ruleset, &attr, 0); err != nil {
		return os.NewSyscallError("landlock_add_rule", err)
	}
	return nil
}

func readOnly(opts []string) bool { return hasOption(opts, "ro") }

// hasOption reports whether opts holds the mount option o.
func hasOption(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}
