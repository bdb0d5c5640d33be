// Package bpf holds a compiled seccomp filter as plain data and installs
// it. It makes no cgo call and links no libseccomp, so the init stage can
// carry it: package seccomp compiles a policy into a Program in the
// supervisor, the init stage receives it as bytes and installs it last.
package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxInsns is the kernel's limit on one classic BPF program (BPF_MAXINSNS).
const MaxInsns = 4096

// Program is a compiled filter, ready for Install. It holds no pointers or
// handles, so the supervisor can send it to the child as bytes.
type Program struct {
	// Filter is the classic BPF program, in native byte order.
	Filter []unix.SockFilter
	// Notify asks Install for a user-notification listener: denials are
	// then held until the supervisor answers them (package seccomp's
	// Denials.Serve).
	Notify bool
	// Flags are extra seccomp(2) filter flags the profile asked for
	// (SECCOMP_FILTER_FLAG_LOG, _SPEC_ALLOW, _WAIT_KILLABLE_RECV).
	Flags uint32
	// Errno is what the supervisor answers a notified denial with (see
	// package seccomp's Denials.Serve): the profile's default errno, EPERM unless it says
	// otherwise. It stays with the supervisor: MarshalBinary leaves it out,
	// since the child only installs the filter.
	Errno unix.Errno
}

const programMagic = "PMJSECC2"

// MarshalBinary encodes what Install needs: magic, notify (u32), flags
// (u32), instruction count (u32), then each instruction as
// code (u16), jt, jf (u8), k (u32), all in native byte order — the filter
// only ever runs on the machine that compiled it.
func (p *Program) MarshalBinary() ([]byte, error) {
	if len(p.Filter) == 0 || len(p.Filter) > MaxInsns {
		return nil, fmt.Errorf("marshal seccomp program: %d instructions, want 1..%d", len(p.Filter), MaxInsns)
	}
	b := make([]byte, 0, len(programMagic)+12+8*len(p.Filter))
	b = append(b, programMagic...)
	var notify uint32
	if p.Notify {
		notify = 1
	}
	ne := binary.NativeEndian
	b = ne.AppendUint32(b, notify)
	b = ne.AppendUint32(b, p.Flags)
	b = ne.AppendUint32(b, uint32(len(p.Filter)))
	for _, in := range p.Filter {
		b = ne.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = ne.AppendUint32(b, in.K)
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote; Errno is left zero. The
// bytes come from the supervisor, but a truncated or oversized message is
// still refused rather than half-installed.
func (p *Program) UnmarshalBinary(b []byte) error {
	head := len(programMagic) + 12
	if len(b) < head || string(b[:len(programMagic)]) != programMagic {
		return errors.New("unmarshal seccomp program: not a pmjail seccomp program")
	}
	ne := binary.NativeEndian
	b = b[len(programMagic):]
	notify, flags, n := ne.Uint32(b), ne.Uint32(b[4:]), ne.Uint32(b[8:])
	b = b[12:]
	if notify > 1 || n == 0 || n > MaxInsns || uint64(len(b)) != 8*uint64(n) {
		return fmt.Errorf("unmarshal seccomp program: malformed header (notify %d, %d instructions, %d bytes)", notify, n, len(b))
	}
	*p = Program{Filter: DecodeInsns(b), Notify: notify == 1, Flags: flags}
	return nil
}

// DecodeInsns decodes whole 8-byte instructions (struct sock_filter) in
// native byte order.
func DecodeInsns(b []byte) []unix.SockFilter {
	ne := binary.NativeEndian
	filter := make([]unix.SockFilter, len(b)/8)
	for i := range filter {
		in := b[8*i:]
		filter[i] = unix.SockFilter{Code: ne.Uint16(in), Jt: in[2], Jf: in[3], K: ne.Uint32(in[4:])}
	}
	return filter
}
