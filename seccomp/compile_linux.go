//go:build cgo

package seccomp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/seccomp/bpf"
)

// Compile builds the filter for p under opt. It runs in the supervisor
// (libseccomp is cgo); the result is plain BPF for Install. A build
// without cgo has no compiler: there Compile returns ErrNoCompiler.
func Compile(p *specs.LinuxSeccomp, opt Options) (*bpf.Program, error) {
	if p == nil {
		return nil, errors.New("compile seccomp: no profile")
	}
	if opt.Log && opt.Notify {
		return nil, errors.New("compile seccomp: Log and Notify exclude each other: a logged call is never denied, so never notified")
	}
	c := compiler{opt: opt, errno: unix.EPERM, allowed: map[string]bool{}}
	for _, name := range opt.AllowDangerous {
		if !slices.Contains(DangerousSyscalls(), name) {
			return nil, fmt.Errorf("compile seccomp: AllowDangerous: %q is not one of the dangerous calls pmjail filters", name)
		}
		c.allowed[name] = true
	}
	if p.DefaultErrnoRet != nil {
		c.errno = unix.Errno(*p.DefaultErrnoRet)
	}
	var err error
	if c.defAct, err = c.action(p.DefaultAction, p.DefaultErrnoRet); err != nil {
		return nil, fmt.Errorf("compile seccomp: defaultAction: %w", err)
	}
	flags, err := filterFlags(p.Flags)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	for i, a := range p.Architectures {
		if a != nativeArch {
			return nil, fmt.Errorf("compile seccomp: architectures[%d]: unsupported architecture %q (only %q)", i, a, nativeArch)
		}
	}

	f, err := libseccomp.NewFilter(c.defAct)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp: new filter: %w", err)
	}
	defer f.Release()
	c.f = f
	if treeLayout {
		// A binary tree of syscall numbers instead of libseccomp's list:
		// the same verdicts (TestTreeLayoutKeepsVerdicts), reached in
		// O(log n) comparisons. The kernel runs the filter for every
		// syscall number as it attaches it (its allow cache), so this
		// also halves what the init stage pays to install it (~120 to
		// ~65 µs for Deno's here). libseccomp before 2.5 refuses, and
		// keeps the list.
		_ = f.SetOptimize(2)
	}
	// A foreign architecture's entry point (i386 int 0x80, x32 numbers) is
	// denied, never notified: its numbers would be misnamed.
	if err := f.SetBadArchAction(libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))); err != nil {
		return nil, fmt.Errorf("compile seccomp: bad-arch action: %w", err)
	}

	if err := c.addProfileRules(p); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	if err := c.addDangerRules(p); err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	filter, err := exportBPF(f)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp: %w", err)
	}
	if len(filter) > bpf.MaxInsns {
		return nil, fmt.Errorf("compile seccomp: %d instructions exceed the kernel's limit of %d", len(filter), bpf.MaxInsns)
	}
	return &bpf.Program{Filter: filter, Notify: opt.Notify, Flags: flags, Errno: c.errno}, nil
}

// actions maps each OCI action in supportedActions to its libseccomp
// action. ERRNO still needs its errno, and log or notify mode may replace
// a denial (see compiler.action).
var actions = map[specs.LinuxSeccompAction]libseccomp.ScmpAction{
	specs.ActAllow:       libseccomp.ActAllow,
	specs.ActLog:         libseccomp.ActLog,
	specs.ActErrno:       libseccomp.ActErrno,
	specs.ActKill:        libseccomp.ActKillThread,
	specs.ActKillThread:  libseccomp.ActKillThread,
	specs.ActKillProcess: libseccomp.ActKillProcess,
	specs.ActTrap:        libseccomp.ActTrap,
}

// compareOps maps each operator in operators to libseccomp's.
var compareOps = map[specs.LinuxSeccompOperator]libseccomp.ScmpCompareOp{
	specs.OpNotEqual:     libseccomp.CompareNotEqual,
	specs.OpLessThan:     libseccomp.CompareLess,
	specs.OpLessEqual:    libseccomp.CompareLessOrEqual,
	specs.OpEqualTo:      libseccomp.CompareEqual,
	specs.OpGreaterEqual: libseccomp.CompareGreaterEqual,
	specs.OpGreaterThan:  libseccomp.CompareGreater,
	specs.OpMaskedEqual:  libseccomp.CompareMaskedEqual,
}

// treeLayout is off only in tests that compare the two layouts.
var treeLayout = true

type compiler struct {
	opt     Options
	f       *libseccomp.ScmpFilter
	defAct  libseccomp.ScmpAction
	errno   unix.Errno
	allowed map[string]bool // dangerous calls the operator allows
}

// action maps a profile action. A profile's denials become LOG in log mode
// and NOTIFY in notify mode — except an ERRNO with an errno of its own,
// which stays as it is since a notification is answered with the default.
func (c *compiler) action(a specs.LinuxSeccompAction, errnoRet *uint) (libseccomp.ScmpAction, error) {
	if err := CheckAction(a); err != nil {
		return 0, err
	}
	act := actions[a]
	switch a {
	case specs.ActAllow, specs.ActLog:
		return act, nil
	case specs.ActErrno:
		errno := c.errno
		if errnoRet != nil {
			errno = unix.Errno(*errnoRet)
		}
		act = act.SetReturnCode(int16(errno))
		if c.opt.Notify && errno == c.errno {
			act = libseccomp.ActNotify
		}
	}
	if c.opt.Log {
		return libseccomp.ActLog, nil
	}
	return act, nil
}

// deny is the action for a dangerous call: notified in notify mode, denied
// with EPERM otherwise — also in log mode, which relaxes the profile only.
func (c *compiler) deny() libseccomp.ScmpAction {
	if c.opt.Notify {
		return libseccomp.ActNotify
	}
	return libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
}

func (c *compiler) dangerous(name string) bool {
	return !c.allowed[name] && slices.Contains(DangerousSyscalls(), name)
}

func (c *compiler) addProfileRules(p *specs.LinuxSeccomp) error {
	for i, rule := range p.Syscalls {
		act, err := c.action(rule.Action, rule.ErrnoRet)
		if err != nil {
			return fmt.Errorf("syscalls[%d].action: %w", i, err)
		}
		conds, err := conditions(rule.Args)
		if err != nil {
			return fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		for j, name := range rule.Names {
			if c.dangerous(name) {
				continue // replaced by addDangerRules
			}
			if err := c.add(name, act, conds); err != nil {
				return fmt.Errorf("syscalls[%d].names[%d]: %w", i, j, err)
			}
		}
	}
	return nil
}

// profileAllows says whether the profile lets name through in some case:
// an allow or log rule for it, or an allowing default with no rule of its
// own that denies it unconditionally.
func profileAllows(p *specs.LinuxSeccomp, name string) bool {
	denied := false
	for _, rule := range p.Syscalls {
		if !slices.Contains(rule.Names, name) {
			continue
		}
		if rule.Action == specs.ActAllow || rule.Action == specs.ActLog {
			return true
		}
		if len(rule.Args) == 0 {
			denied = true
		}
	}
	return !denied && (p.DefaultAction == specs.ActAllow || p.DefaultAction == specs.ActLog)
}

// addDangerRules enforces the dangerous set. Rules are written so that, for
// one syscall, their conditions never overlap: then dropping a rule whose
// action equals the default (libseccomp refuses those) changes nothing, and
// no result depends on the order libseccomp evaluates rules in.
func (c *compiler) addDangerRules(p *specs.LinuxSeccomp) error {
	deny := c.deny()
	for _, name := range dangerousPlain {
		if c.dangerous(name) {
			if err := c.add(name, deny, nil); err != nil {
				return fmt.Errorf("deny %s: %w", name, err)
			}
		}
	}
	allowAct := libseccomp.ActAllow

	if c.dangerous(dangerClone3) {
		// Not notified: glibc tries clone3 for every new thread and
		// expects ENOSYS, so this is not a violation worth a round trip.
		if err := c.add(dangerClone3, libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS)), nil); err != nil {
			return fmt.Errorf("clone3: %w", err)
		}
	}

	if c.dangerous(dangerClone) {
		if !profileAllows(p, dangerClone) {
			if err := c.add(dangerClone, deny, nil); err != nil {
				return fmt.Errorf("deny clone: %w", err)
			}
		} else {
			var mask uint64
			for _, flag := range cloneNamespaceFlags {
				mask |= flag
				if err := c.add(dangerClone, deny, []libseccomp.ScmpCondition{masked(0, flag, flag)}); err != nil {
					return fmt.Errorf("deny clone flag %#x: %w", flag, err)
				}
			}
			if err := c.add(dangerClone, allowAct, []libseccomp.ScmpCondition{masked(0, mask, 0)}); err != nil {
				return fmt.Errorf("allow clone: %w", err)
			}
		}
	}

	if c.dangerous(dangerPersonality) {
		if !profileAllows(p, dangerPersonality) {
			if err := c.add(dangerPersonality, deny, nil); err != nil {
				return fmt.Errorf("deny personality: %w", err)
			}
		} else {
			q := uint64(personalityQuery)
			for _, r := range []struct {
				act libseccomp.ScmpAction
				op  libseccomp.ScmpCompareOp
			}{{allowAct, libseccomp.CompareEqual}, {deny, libseccomp.CompareLess}, {deny, libseccomp.CompareGreater}} {
				cond, err := libseccomp.MakeCondition(0, r.op, q)
				if err != nil {
					return fmt.Errorf("personality: %w", err)
				}
				if err := c.add(dangerPersonality, r.act, []libseccomp.ScmpCondition{cond}); err != nil {
					return fmt.Errorf("personality: %w", err)
				}
			}
		}
	}

	if c.dangerous(dangerIoctl) {
		if !profileAllows(p, dangerIoctl) {
			if err := c.add(dangerIoctl, deny, nil); err != nil {
				return fmt.Errorf("deny ioctl: %w", err)
			}
		} else {
			// The request is an unsigned int: the kernel ignores the upper
			// half of the register, so compare the lower 32 bits only.
			for _, req := range deniedIoctls {
				if err := c.add(dangerIoctl, deny, []libseccomp.ScmpCondition{masked(1, 0xffffffff, req)}); err != nil {
					return fmt.Errorf("deny ioctl %#x: %w", req, err)
				}
			}
			for _, pat := range complement32(deniedIoctls) {
				if err := c.add(dangerIoctl, allowAct, []libseccomp.ScmpCondition{masked(1, pat.mask, pat.value)}); err != nil {
					return fmt.Errorf("allow ioctl: %w", err)
				}
			}
		}
	}
	return nil
}

// add adds one rule, skipping one whose action is the default: libseccomp
// refuses those, and the default already gives the same answer.
func (c *compiler) add(name string, act libseccomp.ScmpAction, conds []libseccomp.ScmpCondition) error {
	if act == c.defAct {
		return nil
	}
	nr, err := libseccomp.GetSyscallFromName(name)
	if err != nil {
		return fmt.Errorf("unknown syscall %q", name)
	}
	if len(conds) == 0 {
		err = c.f.AddRule(nr, act)
	} else {
		err = c.f.AddRuleConditional(nr, act, conds)
	}
	if err != nil {
		return fmt.Errorf("add rule for %s: %w", name, err)
	}
	return nil
}

func masked(arg uint, mask, value uint64) libseccomp.ScmpCondition {
	// MakeCondition fails only on a bad argument index or operator.
	cond, err := libseccomp.MakeCondition(arg, libseccomp.CompareMaskedEqual, mask, value)
	if err != nil {
		panic(err)
	}
	return cond
}

func conditions(args []specs.LinuxSeccompArg) ([]libseccomp.ScmpCondition, error) {
	var conds []libseccomp.ScmpCondition
	for i, a := range args {
		op, ok := compareOps[a.Op]
		if !ok {
			return nil, fmt.Errorf("args[%d].op: unknown operator %q", i, a.Op)
		}
		values := []uint64{a.Value}
		if op == libseccomp.CompareMaskedEqual {
			values = append(values, a.ValueTwo)
		}
		cond, err := libseccomp.MakeCondition(a.Index, op, values...)
		if err != nil {
			return nil, fmt.Errorf("args[%d]: %w", i, err)
		}
		conds = append(conds, cond)
	}
	return conds, nil
}

func filterFlags(flags []specs.LinuxSeccompFlag) (uint32, error) {
	var bits uint32
	for i, f := range flags {
		b, ok := flagBits[f]
		if !ok {
			return 0, fmt.Errorf("flags[%d]: unknown flag %q", i, f)
		}
		bits |= b
	}
	return bits, nil
}

// exportBPF writes the filter through a memfd: libseccomp 2.5 (Debian 12)
// can only export to a file descriptor.
func exportBPF(f *libseccomp.ScmpFilter) ([]unix.SockFilter, error) {
	fd, err := unix.MemfdCreate("pmjail-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("export bpf: %w", os.NewSyscallError("memfd_create", err))
	}
	file := os.NewFile(uintptr(fd), "pmjail-seccomp")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("export bpf: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("export bpf: %w", err)
	}
	raw, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("export bpf: %w", err)
	}
	if len(raw) == 0 || len(raw)%8 != 0 {
		return nil, fmt.Errorf("export bpf: %d bytes is not a whole program", len(raw))
	}
	return bpf.DecodeInsns(raw), nil
}
