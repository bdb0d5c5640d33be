//go:build cgo

package integration

import (
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// The outer filters some tests run pmjail beneath, to take a layer away
// from it as a host without that layer would. They are built with
// libseccomp (cgo); outerfilter_nocgo_test.go says why not without.

// denyNetworkNamespaces installs the outer filter that refuses new network
// namespaces.
func denyNetworkNamespaces() error {
	f, err := libseccomp.NewFilter(libseccomp.ActAllow)
	if err != nil {
		return err
	}
	defer f.Release()
	eperm := libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	for _, name := range []string{"clone", "unshare"} {
		sc, err := libseccomp.GetSyscallFromName(name)
		if err != nil {
			return err
		}
		cond, err := libseccomp.MakeCondition(0, libseccomp.CompareMaskedEqual, unix.CLONE_NEWNET, unix.CLONE_NEWNET)
		if err != nil {
			return err
		}
		if err := f.AddRuleConditional(sc, eperm, []libseccomp.ScmpCondition{cond}); err != nil {
			return err
		}
	}
	// clone3 hides its flags from a filter: make it unavailable, so that
	// callers fall back to clone.
	sc, err := libseccomp.GetSyscallFromName("clone3")
	if err != nil {
		return err
	}
	if err := f.AddRule(sc, libseccomp.ActErrno.SetReturnCode(int16(unix.ENOSYS))); err != nil {
		return err
	}
	return f.Load()
}

// denyLayer installs the outer filter that removes layer.
func denyLayer(layer string) error {
	f, err := libseccomp.NewFilter(libseccomp.ActAllow)
	if err != nil {
		return err
	}
	defer f.Release()
	rule := func(name string, act libseccomp.ScmpAction, conds ...libseccomp.ScmpCondition) error {
		sc, err := libseccomp.GetSyscallFromName(name)
		if err != nil {
			return err
		}
		if len(conds) == 0 {
			return f.AddRule(sc, act)
		}
		return f.AddRuleConditional(sc, act, conds)
	}
	errno := func(e unix.Errno) libseccomp.ScmpAction { return libseccomp.ActErrno.SetReturnCode(int16(e)) }
	switch layer {
	case "seccomp":
		// Installing a filter fails, both ways, as on a kernel without
		// seccomp filters; the queries libseccomp compiles with still
		// answer.
		setFilter, err := libseccomp.MakeCondition(0, libseccomp.CompareEqual, unix.SECCOMP_SET_MODE_FILTER)
		if err != nil {
			return err
		}
		if err := rule("seccomp", errno(unix.EINVAL), setFilter); err != nil {
			return err
		}
		setSeccomp, err := libseccomp.MakeCondition(0, libseccomp.CompareEqual, unix.PR_SET_SECCOMP)
		if err != nil {
			return err
		}
		if err := rule("prctl", errno(unix.EINVAL), setSeccomp); err != nil {
			return err
		}
	case "pid_namespace", "network_namespace":
		flag := uint64(unix.CLONE_NEWPID)
		if layer == "network_namespace" {
			flag = unix.CLONE_NEWNET
		}
		cond, err := libseccomp.MakeCondition(0, libseccomp.CompareMaskedEqual, flag, flag)
		if err != nil {
			return err
		}
		for _, name := range []string{"clone", "unshare"} {
			if err := rule(name, errno(unix.EPERM), cond); err != nil {
				return err
			}
		}
		// clone3 hides its flags from a filter: make it unavailable, so
		// that callers fall back to clone.
		if err := rule("clone3", errno(unix.ENOSYS)); err != nil {
			return err
		}
	default:
		return errUnknownLayer(layer)
	}
	return f.Load()
}

type errUnknownLayer string

func (e errUnknownLayer) Error() string { return "no outer filter removes layer " + string(e) }
