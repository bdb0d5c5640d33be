package profiles

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/capread"
	"github.com/pmjail/pmjail/internal/strictjson"
)

// Limits bound one run. A zero field means "not set" and is filled from the
// profile, then checked against the operator's ceiling.
type Limits struct {
	Memory  Size     `json:"memory,omitempty"`
	CPUTime Duration `json:"cpu_time,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
	Pids    int64    `json:"pids,omitempty"`
	Output  Size     `json:"output,omitempty"`
	// Tmp caps the job's writable /tmp.
	Tmp Size `json:"tmp,omitempty"`
}

// Merge fills every unset field of l from d.
func (l Limits) Merge(d Limits) Limits {
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.CPUTime == 0 {
		l.CPUTime = d.CPUTime
	}
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.Output == 0 {
		l.Output = d.Output
	}
	if l.Tmp == 0 {
		l.Tmp = d.Tmp
	}
	return l
}

// Clamp lowers every limit of l that is above the ceiling's (a zero
// ceiling field sets no bound).
func (l Limits) Clamp(ceil Limits) Limits {
	if ceil.Memory > 0 && l.Memory > ceil.Memory {
		l.Memory = ceil.Memory
	}
	if ceil.CPUTime > 0 && l.CPUTime > ceil.CPUTime {
		l.CPUTime = ceil.CPUTime
	}
	if ceil.Timeout > 0 && l.Timeout > ceil.Timeout {
		l.Timeout = ceil.Timeout
	}
	if ceil.Pids > 0 && l.Pids > ceil.Pids {
		l.Pids = ceil.Pids
	}
	if ceil.Output > 0 && l.Output > ceil.Output {
		l.Output = ceil.Output
	}
	if ceil.Tmp > 0 && l.Tmp > ceil.Tmp {
		l.Tmp = ceil.Tmp
	}
	return l
}

// Within checks l against a ceiling; the error (a *strictjson.Error) names
// the first field over. The ceiling is the daemon's config's or the CLI's
// built-in one, so the message names neither.
func (l Limits) Within(ceil Limits) error {
	over := func(field string, v, max any) error {
		return strictjson.Errorf("limits."+field, "%v is above the ceiling of %v", v, max)
	}
	switch {
	case ceil.Memory > 0 && l.Memory > ceil.Memory:
		return over("memory", l.Memory, ceil.Memory)
	case ceil.CPUTime > 0 && l.CPUTime > ceil.CPUTime:
		return over("cpu_time", l.CPUTime, ceil.CPUTime)
	case ceil.Timeout > 0 && l.Timeout > ceil.Timeout:
		return over("timeout", l.Timeout, ceil.Timeout)
	case ceil.Pids > 0 && l.Pids > ceil.Pids:
		return over("pids", l.Pids, ceil.Pids)
	case ceil.Output > 0 && l.Output > ceil.Output:
		return over("output", l.Output, ceil.Output)
	case ceil.Tmp > 0 && l.Tmp > ceil.Tmp:
		return over("tmp", l.Tmp, ceil.Tmp)
	}
	return nil
}

// Validate checks that every limit is set and sane; the error is a
// *strictjson.Error naming the field.
func (l Limits) Validate() error {
	switch {
	case l.Memory < 16<<20:
		return belowSize("limits.memory", l.Memory, "16M")
	case time.Duration(l.Timeout) < 10*time.Millisecond:
		return strictjson.Errorf("limits.timeout", "%v is below the 10ms minimum", l.Timeout)
	case time.Duration(l.CPUTime) < 10*time.Millisecond:
		return strictjson.Errorf("limits.cpu_time", "%v is below the 10ms minimum", l.CPUTime)
	case l.Pids < 1:
		return strictjson.Errorf("limits.pids", "%d is below 1", l.Pids)
	case l.Output < 1:
		return strictjson.Errorf("limits.output", "%v is below 1 byte", l.Output)
	case l.Tmp < 1<<20:
		return belowSize("limits.tmp", l.Tmp, "1M")
	}
	return nil
}

// belowSize refuses a size under its minimum. One that no unit writes
// is said in bytes, and a small one, a unit forgotten (`--memory 64`),
// gets the unit that was likely meant.
func belowSize(field string, v Size, minimum string) error {
	s := v.String()
	switch {
	case v <= 0 || strings.ContainsAny(s, "KMG"):
		return strictjson.Errorf(field, "%s is below the %s minimum", s, minimum)
	case v < 1<<14:
		return strictjson.Errorf(field, "%s bytes is below the %s minimum (a size without a unit is bytes: %sM?)", s, minimum, s)
	}
	return strictjson.Errorf(field, "%s bytes is below the %s minimum", s, minimum)
}

// Profile is a named hardening profile: default limits, the seccomp policy
// for each kind of program and the optional layers.
type Profile struct {
	Name   string `json:"name"`
	Limits Limits `json:"limits"`
	// Seccomp names the seccomp policy per program kind: "deno", "python",
	// "native". A value is a built-in policy name or a file path.
	Seccomp map[string]string `json:"seccomp"`
	// SeccompLog switches the filter to log mode (development only).
	SeccompLog bool `json:"seccomp_log,omitempty"`
	// Landlock adds a Landlock ruleset where the kernel has one.
	Landlock bool `json:"landlock"`
	// CoarseTime switches on the timing mitigation.
	CoarseTime bool `json:"coarse_time,omitempty"`
}

//go:embed builtin/*.json
var builtinFS embed.FS

// ErrUnknownProfile is returned for a profile name with no
// built-in profile.
var ErrUnknownProfile = errors.New("unknown profile")

// Names lists the built-in hardening profiles.
func Names() []string {
	entries, _ := builtinFS.ReadDir("builtin")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// Load returns the built-in profile called name, or reads the profile file
// at name when it contains a slash or ends in .json.
func Load(name string) (*Profile, error) {
	if name == "" {
		name = "default"
	}
	if strings.ContainsRune(name, '/') || strings.HasSuffix(name, ".json") {
		// The caller says it is a profile; capread's errors name the file.
		data, err := capread.File(name, maxFileBytes)
		if err != nil {
			return nil, err
		}
		p, err := decodeProfile(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return p, nil
	}
	if cached, ok := builtins.Load(name); ok {
		p := *cached.(*Profile)
		return &p, nil
	}
	data, err := builtinFS.ReadFile("builtin/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("%w %q (built-in profiles: %s)", ErrUnknownProfile, name, strings.Join(Names(), ", "))
	}
	p, err := decodeProfile(data)
	if err != nil {
		return nil, fmt.Errorf("built-in profile %s: %w", name, err)
	}
	builtins.Store(name, p)
	copied := *p
	return &copied, nil
}

// maxFileBytes caps a profile or seccomp policy read from a file: the
// largest built-in is a few KiB.
const maxFileBytes = 1 << 20

// builtins holds the built-in profiles once decoded and validated: they are
// embedded, so a daemon need not decode one per run. Load hands out
// shallow copies: the Seccomp map is shared and never written.
var builtins sync.Map

func decodeProfile(data []byte) (*Profile, error) {
	var p Profile
	if err := strictjson.Decode(data, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// ProgramKinds are the kinds of program a profile names a seccomp policy
// for: Deno, Python (Pyodide in Deno) and native programs.
var ProgramKinds = []string{"deno", "python", "native"}

// Validate checks a profile: complete limits and loadable seccomp policies.
func (p *Profile) Validate() error {
	if p.Name == "" {
		return errors.New("name: missing")
	}
	if err := p.Limits.Validate(); err != nil {
		return err
	}
	for _, kind := range ProgramKinds {
		if _, ok := p.Seccomp[kind]; !ok {
			return fmt.Errorf("seccomp.%s: missing (name a built-in policy: %s, or a file)", kind, strings.Join(SeccompNames(), ", "))
		}
		if err := checkSeccompRef(p.Seccomp[kind]); err != nil {
			return fmt.Errorf("seccomp.%s: %w", kind, err)
		}
	}
	for kind := range p.Seccomp {
		if !slices.Contains(ProgramKinds, kind) {
			return fmt.Errorf("seccomp.%s: unknown program kind (want %s)", kind, strings.Join(ProgramKinds, ", "))
		}
	}
	return nil
}

// SeccompPolicy loads the seccomp policy the profile names for a program
// kind ("deno", "python" or "native").
func (p *Profile) SeccompPolicy(kind string) (*specs.LinuxSeccomp, error) {
	src, err := p.SeccompSource(kind)
	if err != nil {
		return nil, err
	}
	return src.Policy()
}

// SeccompSource returns the seccomp policy the profile names for a program
// kind as stored, undecoded (a file is read again at each call).
func (p *Profile) SeccompSource(kind string) (*SeccompSource, error) {
	ref := p.Seccomp[kind]
	if isSeccompFile(ref) {
		return seccompFile(ref)
	}
	return builtinSeccomp(ref)
}

func isSeccompFile(ref string) bool {
	return strings.ContainsRune(ref, '/') || strings.HasSuffix(ref, ".json")
}

// checkSeccompRef checks that a policy reference loads: a file is read and
// validated; a built-in name need only exist, since every built-in policy
// is validated where it is built (TestBuiltinSeccompProfiles), and decoding
// all three at each start would cost every CLI run.
func checkSeccompRef(ref string) error {
	if isSeccompFile(ref) {
		_, err := LoadSeccompFile(ref)
		return err
	}
	if _, err := fs.Stat(seccompFS, builtinSeccompPath(ref)); err != nil {
		return fmt.Errorf("seccomp policy %q: %w", ref, ErrUnknownPolicy)
	}
	return nil
}
