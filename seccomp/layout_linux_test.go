//go:build cgo

package seccomp_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/seccomp"
)

// TestTreeLayoutKeepsVerdicts compiles each built-in policy in both of
// libseccomp's layouts and runs both, in a classic-BPF interpreter, on
// every syscall number with argument values drawn from the policy's own
// conditions: the tree must decide exactly as the list does, and in far
// fewer steps (what the kernel pays at every filtered call, and for every
// syscall number as it attaches the filter).
func TestTreeLayoutKeepsVerdicts(t *testing.T) {
	for _, name := range profiles.SeccompNames() {
		for _, notify := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/notify=%t", name, notify), func(t *testing.T) {
				p, err := profiles.Seccomp(name)
				if err != nil {
					t.Fatal(err)
				}
				opt := seccomp.Options{Notify: notify}
				undo := seccomp.SetTreeLayout(false)
				list, err := seccomp.Compile(p, opt)
				undo()
				if err != nil {
					t.Fatal(err)
				}
				tree, err := seccomp.Compile(p, opt)
				if err != nil {
					t.Fatal(err)
				}
				// Steps summed over the plain probes (one per syscall number,
				// no arguments): what the kernel's allow cache walks.
				var listSteps, treeSteps, probes int
				for _, d := range probeData(p) {
					lv, ls, err := runClassic(list.Filter, d)
					if err != nil {
						t.Fatalf("list layout: %v", err)
					}
					tv, ts, err := runClassic(tree.Filter, d)
					if err != nil {
						t.Fatalf("tree layout: %v", err)
					}
					if lv != tv {
						t.Fatalf("syscall %d (arch %#x, args %v): tree says %#x, list %#x", d.nr, d.arch, d.args, tv, lv)
					}
					if d.plain {
						listSteps, treeSteps, probes = listSteps+ls, treeSteps+ts, probes+1
					}
				}
				listMean, treeMean := float64(listSteps)/float64(probes), float64(treeSteps)/float64(probes)
				t.Logf("%d syscall numbers: %.1f instructions run on average by the list (%d in all), %.1f by the tree (%d)", probes, listMean, len(list.Filter), treeMean, len(tree.Filter))
				if treeMean*3 > listMean {
					t.Errorf("the tree runs %.1f instructions a call on average, the list %.1f: no tree layout", treeMean, listMean)
				}
			})
		}
	}
}

type seccompData struct {
	nr, arch uint32
	args     [6]uint64
	plain    bool // the number's probe without arguments
}

func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.NativeEndian.PutUint32(b[0:], d.nr)
	binary.NativeEndian.PutUint32(b[4:], d.arch)
	for i, a := range d.args {
		binary.NativeEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// probeData is every syscall number (and a few past the table, and of
// foreign architectures) with all-zero arguments, and with each argument
// set in turn to values at and around those the policy compares with;
// plus, per rule, all its compared arguments set at once.
func probeData(p *specs.LinuxSeccomp) []seccompData {
	values := map[uint][]uint64{}
	for _, rule := range p.Syscalls {
		for _, a := range rule.Args {
			for _, v := range []uint64{a.Value, a.ValueTwo, a.Value &^ a.ValueTwo, a.Value | a.ValueTwo} {
				values[a.Index] = append(values[a.Index], v, v-1, v+1, ^v)
			}
		}
	}
	for i := range uint(6) {
		values[i] = append(values[i], 0, 1, math.MaxUint32, math.MaxUint32+1, math.MaxUint64)
		slices.Sort(values[i])
		values[i] = slices.Compact(values[i])
	}
	var out []seccompData
	add := func(nr, arch uint32) {
		out = append(out, seccompData{nr: nr, arch: arch, plain: true})
		for i := range uint(6) {
			for _, v := range values[i] {
				d := seccompData{nr: nr, arch: arch}
				d.args[i] = v
				out = append(out, d)
			}
		}
		for _, rule := range p.Syscalls {
			d := seccompData{nr: nr, arch: arch}
			for _, a := range rule.Args {
				d.args[a.Index] = a.Value
				if a.Op == specs.OpMaskedEqual {
					d.args[a.Index] = a.ValueTwo
				}
			}
			out = append(out, d)
		}
	}
	for nr := range uint32(512) {
		add(nr, unix.AUDIT_ARCH_X86_64)
	}
	for _, nr := range []uint32{0x40000000, 0x40000000 | unix.SYS_MOUNT, math.MaxUint32} {
		add(nr, unix.AUDIT_ARCH_X86_64)
	}
	add(unix.SYS_MOUNT, unix.AUDIT_ARCH_I386)
	return out
}

// runClassic interprets the instructions libseccomp emits on seccomp_data
// and returns the filter's verdict and the instructions it ran. Anything
// else is an error, so that a change in libseccomp's output cannot pass
// unexamined.
func runClassic(prog []unix.SockFilter, d seccompData) (verdict uint32, steps int, err error) {
	data := d.bytes()
	var a uint32
	for pc := 0; pc < len(prog); {
		in := prog[pc]
		steps++
		jump := func(cond bool) {
			if cond {
				pc += 1 + int(in.Jt)
			} else {
				pc += 1 + int(in.Jf)
			}
		}
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || in.K+4 > uint32(len(data)) {
				return 0, steps, fmt.Errorf("load at %d", in.K)
			}
			a = binary.NativeEndian.Uint32(data[in.K:])
			pc++
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= in.K
			pc++
		case unix.BPF_JMP | unix.BPF_JA:
			pc += 1 + int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			jump(a == in.K)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			jump(a > in.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			jump(a >= in.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			jump(a&in.K != 0)
		case unix.BPF_RET | unix.BPF_K:
			return in.K, steps, nil
		default:
			return 0, steps, fmt.Errorf("instruction %d: opcode %#x not interpreted", pc, in.Code)
		}
	}
	return 0, steps, fmt.Errorf("ran past the end after %d instructions", steps)
}
