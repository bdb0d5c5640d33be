package profiles

import (
	"embed"
	"errors"
	"fmt"
	"sort"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/capread"
	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/seccomp"
)

//go:embed seccomp/*.json
var seccompFS embed.FS

// ErrUnknownPolicy is returned by Seccomp for a name with no built-in
// seccomp policy.
var ErrUnknownPolicy = errors.New("unknown seccomp policy")

// SeccompNames lists the built-in seccomp policies.
func SeccompNames() []string {
	entries, err := seccompFS.ReadDir("seccomp")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name()[:len(e.Name())-len(".json")])
	}
	sort.Strings(names)
	return names
}

func builtinSeccompPath(name string) string { return "seccomp/" + name + ".json" }

// Seccomp returns a fresh copy of the built-in seccomp policy called name
// ("deno", "pyodide" or "native"), validated.
func Seccomp(name string) (*specs.LinuxSeccomp, error) {
	src, err := builtinSeccomp(name)
	if err != nil {
		return nil, err
	}
	return src.Policy()
}

// LoadSeccompFile reads and validates a seccomp policy from a JSON file in
// the OCI runtime-spec LinuxSeccomp format. Unknown fields are refused: a
// misspelt key must not silently drop part of a policy.
func LoadSeccompFile(path string) (*specs.LinuxSeccomp, error) {
	src, err := seccompFile(path)
	if err != nil {
		return nil, err
	}
	return src.Policy()
}

// SeccompSource is a seccomp policy as stored, not yet decoded. A compiled
// filter is cached by these bytes (package seccomp's Cache), so a run whose
// filter is already compiled never decodes its policy.
type SeccompSource struct {
	// Ref is the built-in policy's name or the file's path.
	Ref string
	// Data is the policy's JSON.
	Data    []byte
	builtin bool
}

func builtinSeccomp(name string) (*SeccompSource, error) {
	data, err := seccompFS.ReadFile(builtinSeccompPath(name))
	if err != nil {
		return nil, fmt.Errorf("seccomp policy %q: %w", name, ErrUnknownPolicy)
	}
	return &SeccompSource{Ref: name, Data: data, builtin: true}, nil
}

func seccompFile(path string) (*SeccompSource, error) {
	data, err := capread.File(path, maxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("load seccomp policy: %w", err)
	}
	return &SeccompSource{Ref: path, Data: data}, nil
}

// Policy decodes and validates the policy: a fresh copy at each call.
func (s *SeccompSource) Policy() (*specs.LinuxSeccomp, error) {
	p, err := decodeSeccomp(s.Data)
	if err != nil {
		if s.builtin {
			return nil, fmt.Errorf("built-in seccomp policy %q: %w", s.Ref, err)
		}
		return nil, fmt.Errorf("seccomp policy %s: %w", s.Ref, err)
	}
	return p, nil
}

func decodeSeccomp(data []byte) (*specs.LinuxSeccomp, error) {
	var p specs.LinuxSeccomp
	if err := strictjson.Decode(data, &p); err != nil {
		return nil, err
	}
	if err := ValidateSeccomp(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ValidateSeccomp checks a policy before it is compiled and says which field
// is wrong: unknown or unsupported actions, operators, flags and
// architectures, empty or unknown syscall names, out-of-range arguments, an
// errno on an action that cannot carry one, and contradictory rules (one
// syscall both allowed and denied without conditions). Which actions,
// operators, flags and architectures exist is package seccomp's to say: it
// compiles them.
func ValidateSeccomp(p *specs.LinuxSeccomp) error {
	if p == nil {
		return errors.New("no seccomp policy")
	}
	if err := checkAction("defaultAction", p.DefaultAction); err != nil {
		return err
	}
	if p.DefaultErrnoRet != nil && p.DefaultAction != specs.ActErrno {
		return fmt.Errorf("defaultErrnoRet: only meaningful with defaultAction %q, not %q", specs.ActErrno, p.DefaultAction)
	}
	if err := checkErrno("defaultErrnoRet", p.DefaultErrnoRet); err != nil {
		return err
	}
	for i, a := range p.Architectures {
		if native := seccomp.NativeArch(); a != native {
			return fmt.Errorf("architectures[%d]: unsupported architecture %q: only the native %q is filtered, other entry points are refused", i, a, native)
		}
	}
	for i, f := range p.Flags {
		if !seccomp.KnownFlag(f) {
			return fmt.Errorf("flags[%d]: unknown flag %q", i, f)
		}
	}
	if p.ListenerPath != "" || p.ListenerMetadata != "" {
		return errors.New("listenerPath: not supported: pmjail's supervisor is the only notification listener")
	}

	// unconditional[name] is the action of the first rule that names the
	// syscall without conditions, to find contradictions.
	type seen struct {
		field string
		allow bool
	}
	unconditional := map[string]seen{}
	for i, rule := range p.Syscalls {
		field := fmt.Sprintf("syscalls[%d]", i)
		if err := checkAction(field+".action", rule.Action); err != nil {
			return err
		}
		if rule.ErrnoRet != nil && rule.Action != specs.ActErrno {
			return fmt.Errorf("%s.errnoRet: only meaningful with action %q, not %q", field, specs.ActErrno, rule.Action)
		}
		if err := checkErrno(field+".errnoRet", rule.ErrnoRet); err != nil {
			return err
		}
		if len(rule.Names) == 0 {
			return fmt.Errorf("%s.names: empty: a rule must name at least one syscall", field)
		}
		argSeen := map[uint]bool{}
		for j, a := range rule.Args {
			af := fmt.Sprintf("%s.args[%d]", field, j)
			if a.Index > 5 {
				return fmt.Errorf("%s.index: %d out of range: syscalls have arguments 0 to 5", af, a.Index)
			}
			if !seccomp.KnownOperator(a.Op) {
				return fmt.Errorf("%s.op: unknown operator %q", af, a.Op)
			}
			if a.ValueTwo != 0 && a.Op != specs.OpMaskedEqual {
				return fmt.Errorf("%s.valueTwo: only meaningful with op %q", af, specs.OpMaskedEqual)
			}
			// libseccomp refuses two checks on one argument in one rule;
			// say so here, with the field, rather than at compile time.
			if argSeen[a.Index] {
				return fmt.Errorf("%s.index: argument %d already checked in this rule: split it into two rules", af, a.Index)
			}
			argSeen[a.Index] = true
		}
		for j, name := range rule.Names {
			nf := fmt.Sprintf("%s.names[%d]", field, j)
			if name == "" {
				return fmt.Errorf("%s: empty syscall name", nf)
			}
			// Without cgo nothing can check the name, nor compile it.
			if err := seccomp.CheckSyscall(name); err != nil && !errors.Is(err, seccomp.ErrNoCompiler) {
				return fmt.Errorf("%s: %w", nf, err)
			}
			if len(rule.Args) > 0 {
				continue
			}
			allow := rule.Action == specs.ActAllow || rule.Action == specs.ActLog
			if prev, ok := unconditional[name]; ok && prev.allow != allow {
				return fmt.Errorf("%s: syscall %q is both allowed and denied without conditions (see %s)", nf, name, prev.field)
			}
			unconditional[name] = seen{field: field, allow: allow}
		}
	}
	return nil
}

func checkAction(field string, a specs.LinuxSeccompAction) error {
	if err := seccomp.CheckAction(a); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

func checkErrno(field string, e *uint) error {
	// 4095 is the largest value the kernel passes back as an error (MAX_ERRNO).
	if e != nil && (*e == 0 || *e > 4095) {
		return fmt.Errorf("%s: %d out of range 1..4095", field, *e)
	}
	return nil
}
