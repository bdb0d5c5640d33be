package job

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
)

// Ceiling is the operator's bound on every job: no request may exceed it.
type Ceiling struct {
	// Limits caps each limit a job may ask for.
	Limits profiles.Limits
	// Broker bounds capabilities and what the broker does.
	Broker ipc.Ceiling
	// Runtimes lists the enabled runtimes; nil enables all.
	Runtimes []runtimes.Name
	// Profiles lists the profiles a job may name; nil allows all built-in
	// ones (a job may never name a file: only the operator may). A job that
	// names none runs under "default" if it is listed, else the first.
	Profiles []string
	// Mode is the least strict mode a job may run in: "required" forces it.
	Mode string
	// Required adds layers to what mode required insists on.
	Required []string
	// Packages are the stored packages (package packages) a job may
	// import; nil allows none. The job's root holds these only.
	Packages []packages.Ref
}

// DefaultCeiling is the CLI's: generous limits, every capability.
func DefaultCeiling() Ceiling {
	return Ceiling{
		Limits: profiles.Limits{
			Memory:  4 << 30,
			CPUTime: profiles.Duration(10 * time.Minute),
			Timeout: profiles.Duration(time.Hour),
			Pids:    4096,
			Output:  256 << 20,
			Tmp:     1 << 30,
		},
		Broker: ipc.PermissiveCeiling(),
	}
}

// Resolved is a job after its profile and ceiling are applied: everything
// needed to run it.
type Resolved struct {
	Request  *Request
	Runtime  runtimes.Name
	Kind     string // seccomp policy kind: deno, python or native
	Profile  *profiles.Profile
	Limits   profiles.Limits
	Mode     string
	Required []string
	// Packages are the ceiling's: what the job's root holds.
	Packages []packages.Ref
}

// Resolve applies the profile the request names (or "default") and checks
// the result against the ceiling. trustedProfilePaths allows a profile
// file path (the CLI's --profile FILE); the socket API never does.
func Resolve(req *Request, ceil Ceiling, trustedProfilePaths bool) (*Resolved, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	r := &Resolved{Request: req, Kind: "native"}
	if req.Exec == nil {
		rt, err := runtimes.ParseName(req.Runtime)
		if err != nil {
			return nil, invalidAt("runtime", "%w", err)
		}
		if ceil.Runtimes != nil && !slices.Contains(ceil.Runtimes, rt) {
			return nil, invalidAt("runtime", "%s is not enabled on this server", rt)
		}
		r.Runtime = rt
		r.Kind = string(rt)
		field, text := req.programText()
		if rt == runtimes.Deno {
			// Before the run: an import of a package not allowed here is
			// refused by name (the job's root would refuse it anyway).
			refs, err := packages.Scan(text)
			if err == nil {
				err = packages.Allowed(refs, ceil.Packages)
			}
			if err != nil {
				return nil, invalidAt(field, "%w", err)
			}
		}
		r.Packages = forRuntime(rt, text, ceil.Packages)
	}
	if strings.ContainsAny(req.Profile, "/.") && !trustedProfilePaths {
		return nil, invalidAt("profile", "%q: only built-in profile names are accepted here", req.Profile)
	}
	if ceil.Profiles != nil && req.Profile != "" && !slices.Contains(ceil.Profiles, req.Profile) {
		return nil, invalidAt("profile", "%q is not allowed on this server", req.Profile)
	}
	name := req.Profile
	if name == "" && ceil.Profiles != nil && !slices.Contains(ceil.Profiles, "default") && len(ceil.Profiles) > 0 {
		// An operator who allows only stricter profiles means every job,
		// also one that names none, to run under one of them.
		name = ceil.Profiles[0]
	}
	prof, err := profiles.Load(name)
	if err != nil {
		return nil, invalidAt("profile", "%w", err)
	}
	r.Profile = prof
	// A limit the job leaves out takes the profile's default, lowered to
	// the operator's ceiling; one the job asks for must fit under it.
	r.Limits = req.Limits.Merge(prof.Limits.Clamp(ceil.Limits))
	if err := r.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := r.Limits.Within(ceil.Limits); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := req.Capabilities.Within(ceil.Broker); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r.Mode = req.Mode
	if r.Mode == "" {
		r.Mode = ModeAuto
	}
	if ceil.Mode == ModeRequired {
		r.Mode = ModeRequired
	}
	r.Required = ceil.Required
	return r, nil
}

// forRuntime are the allowed packages a job's root holds: the runtime's
// kind only, and for Deno none unless the source names an npm: specifier
// at all (a run with packages does without the warm guest cache).
func forRuntime(rt runtimes.Name, source string, allowed []packages.Ref) []packages.Ref {
	kind := packages.Python
	if rt == runtimes.Deno {
		if !strings.Contains(source, "npm:") {
			return nil
		}
		kind = packages.NPM
	}
	var out []packages.Ref
	for _, r := range allowed {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// programText is the program's code as one text for scanning its
// imports, and the field it came from: the source, or every file of a
// several-file job (any of them may import a package).
func (r *Request) programText() (field string, text string) {
	if r.Files == nil {
		return "source", r.Source
	}
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(r.Files)) {
		b.WriteString(r.Files[p])
		b.WriteByte('\n')
	}
	return "files", b.String()
}

// String is a one-line summary for logs.
func (r *Resolved) String() string {
	return fmt.Sprintf("%s profile=%s mode=%s memory=%v timeout=%v", r.Kind, r.Profile.Name, r.Mode, r.Limits.Memory, r.Limits.Timeout)
}
