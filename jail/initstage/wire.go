package initstage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// The control socket's messages (perhaps a Premount, then a Config and a
// Join one way, Reports the other) are length-prefixed records of varints
// and byte strings, written and read field by field. A fresh init stage decodes one configuration and encodes
// one report in its life, and encoding/json's first use of a type builds
// its reflection tables: ~0.3 ms of every CLI run in the init stage and as
// much again in the supervisor (perf). protowire would serve, but its
// package initialiser reads 64 KB of the running binary, which the init
// stage would pay at every start. The supervisor and the init stage come
// from one build (their build IDs are checked), so the format needs no
// versioning beyond its magic.

// Magic numbers open each message: a peer from another build, or a stray
// write, fails at once rather than partway through. A message whose
// format changes takes a new magic number, since a daemon keeps the init
// stage it chose at start while the file may be replaced under it.
const (
	configMagic   = 0x706d6a45 // "pmjE": with the start awaited
	joinMagic     = 0x706d6a6a // "pmjj"
	premountMagic = 0x706d6a70 // "pmjp"
	reportMagic   = 0x706d6a52 // "pmjR": typed stage and layer
)

// Limits on a message's length. A configuration carries the guest's files,
// which the supervisor bounds far below this; a report carries one error.
const (
	maxConfigSize   = 1 << 30
	maxJoinSize     = 64
	maxPremountSize = 1 << 20
	maxReportSize   = 1 << 20
)

// MarshalBinary encodes the configuration as the init stage reads it. It
// refuses what the init stage could not apply (ID-mapped mounts) rather
// than drop it. TestWireCoversTheSpec lists the spec's fields it carries
// and those it leaves out on purpose.
func (c *Config) MarshalBinary() ([]byte, error) {
	var e encoder
	e.begin(configMagic)
	// The guest's files and the filter are nearly all of it: room for
	// them at once, not a megabyte's program copied as the buffer grows.
	room := len(c.Seccomp) + len(c.Stdin) + 4<<10
	for _, f := range c.Files {
		room += len(f.Path) + len(f.Data) + 3*binary.MaxVarintLen64
	}
	e.b = slices.Grow(e.b, room)
	e.bool(c.Process != nil)
	if p := c.Process; p != nil {
		e.uint(uint64(p.User.UID))
		e.uint(uint64(p.User.GID))
		e.bool(p.User.Umask != nil)
		if p.User.Umask != nil {
			e.uint(uint64(*p.User.Umask))
		}
		e.uint(uint64(len(p.User.AdditionalGids)))
		for _, g := range p.User.AdditionalGids {
			e.uint(uint64(g))
		}
		e.string(p.User.Username)
		e.strings(p.Args)
		e.strings(p.Env)
		e.string(p.Cwd)
		e.uint(uint64(len(p.Rlimits)))
		for _, r := range p.Rlimits {
			e.string(r.Type)
			e.uint(r.Hard)
			e.uint(r.Soft)
		}
	}
	e.string(c.Hostname)
	if err := e.mounts(c.Mounts); err != nil {
		return nil, err
	}
	e.bool(c.WritableRoot)
	e.uint(uint64(len(c.Namespaces)))
	for _, ns := range c.Namespaces {
		e.string(string(ns))
	}
	e.uint(uint64(len(c.Files)))
	for _, f := range c.Files {
		e.string(f.Path)
		e.bytes(f.Data)
		e.uint(uint64(f.Mode))
	}
	e.bytes(c.Seccomp)
	e.uint(c.HostMountNS)
	e.bool(c.Landlock)
	e.bool(c.Channel)
	e.string(c.Stdin)
	e.bool(c.AwaitStart)
	return e.end(maxConfigSize)
}

// UnmarshalBinary decodes a configuration MarshalBinary encoded. The
// configuration keeps references into data.
func (c *Config) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	d.magic(configMagic)
	var cfg Config
	if d.bool() {
		p := &specs.Process{}
		p.User.UID = d.uint32()
		p.User.GID = d.uint32()
		if d.bool() {
			umask := d.uint32()
			p.User.Umask = &umask
		}
		p.User.AdditionalGids = list(&d, d.uint32)
		p.User.Username = d.string()
		p.Args = d.strings()
		p.Env = d.strings()
		p.Cwd = d.string()
		p.Rlimits = list(&d, func() specs.POSIXRlimit {
			return specs.POSIXRlimit{Type: d.string(), Hard: d.uint(), Soft: d.uint()}
		})
		cfg.Process = p
	}
	cfg.Hostname = d.string()
	cfg.Mounts = d.mounts()
	cfg.WritableRoot = d.bool()
	cfg.Namespaces = list(&d, func() specs.LinuxNamespaceType { return specs.LinuxNamespaceType(d.string()) })
	cfg.Files = list(&d, func() layout.File {
		return layout.File{Path: d.string(), Data: d.bytes(), Mode: os.FileMode(d.uint32())}
	})
	cfg.Seccomp = d.bytes()
	cfg.HostMountNS = d.uint()
	cfg.Landlock = d.bool()
	cfg.Channel = d.bool()
	cfg.Stdin = d.string()
	cfg.AwaitStart = d.bool()
	if err := d.finish(); err != nil {
		return fmt.Errorf("decode configuration: %w", err)
	}
	*c = cfg
	return nil
}

// mounts encodes a root's mounts, refusing ID-mapped ones.
func (e *encoder) mounts(mounts []specs.Mount) error {
	e.uint(uint64(len(mounts)))
	for _, m := range mounts {
		if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
			return fmt.Errorf("mount %s: ID-mapped mounts are not supported", m.Destination)
		}
		e.string(m.Destination)
		e.string(m.Type)
		e.string(m.Source)
		e.strings(m.Options)
	}
	return nil
}

func (d *decoder) mounts() []specs.Mount {
	return list(d, func() specs.Mount {
		return specs.Mount{Destination: d.string(), Type: d.string(), Source: d.string(), Options: d.strings()}
	})
}

// MarshalBinary encodes the premount.
func (p *Premount) MarshalBinary() ([]byte, error) {
	var e encoder
	e.begin(premountMagic)
	if err := e.mounts(p.Mounts); err != nil {
		return nil, err
	}
	e.uint(p.HostMountNS)
	return e.end(maxPremountSize)
}

// UnmarshalBinary decodes a premount MarshalBinary encoded.
func (p *Premount) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	d.magic(premountMagic)
	prep := Premount{Mounts: d.mounts(), HostMountNS: d.uint()}
	if err := d.finish(); err != nil {
		return fmt.Errorf("decode premount: %w", err)
	}
	*p = prep
	return nil
}

// MarshalBinary encodes the join message.
func (j *Join) MarshalBinary() ([]byte, error) {
	var e encoder
	e.begin(joinMagic)
	e.int(j.TaskFiles)
	return e.end(maxJoinSize)
}

// UnmarshalBinary decodes a join message MarshalBinary encoded.
func (j *Join) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	d.magic(joinMagic)
	join := Join{TaskFiles: d.int()}
	if err := d.finish(); err != nil {
		return fmt.Errorf("decode join: %w", err)
	}
	*j = join
	return nil
}

// MarshalBinary encodes a report.
func (r *Report) MarshalBinary() ([]byte, error) {
	var e encoder
	e.begin(reportMagic)
	e.string(r.Error)
	e.uint(uint64(r.Stage))
	e.string(string(r.Layer))
	e.int(r.ExitCode)
	e.int(r.Landlock)
	e.string(r.LandlockReason)
	e.strings(r.FDs)
	e.bool(r.Premounted)
	e.bool(r.Started)
	e.bool(r.Exited)
	e.int(r.Signal)
	return e.end(maxReportSize)
}

// UnmarshalBinary decodes a report MarshalBinary encoded.
func (r *Report) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	d.magic(reportMagic)
	rep := Report{Error: d.string(), Stage: d.stage(), Layer: Layer(d.string()), ExitCode: d.int(), Landlock: d.int(),
		LandlockReason: d.string(), FDs: d.strings(), Premounted: d.bool(), Started: d.bool(), Exited: d.bool(),
		Signal: d.int()}
	if err := d.finish(); err != nil {
		return fmt.Errorf("decode init report: %w", err)
	}
	*r = rep
	return nil
}

// readConfig reads the supervisor's configuration: one message, which the
// supervisor writes in one piece and follows with nothing until the join.
// Before it, an init stage started ahead may get a premount (Premount),
// which readConfig hands to premount (nil: a premount is an error) while
// the configuration is yet to come.
func readConfig(r io.Reader, premount func(*Premount)) (Config, error) {
	msg, err := readMessage(r, maxConfigSize)
	if err != nil {
		return Config{}, err
	}
	if premount != nil && len(msg) >= 4 && binary.LittleEndian.Uint32(msg) == premountMagic {
		if len(msg) > maxPremountSize {
			return Config{}, fmt.Errorf("premount of %d bytes exceeds %d", len(msg), maxPremountSize)
		}
		var p Premount
		if err := p.UnmarshalBinary(msg); err != nil {
			return Config{}, err
		}
		premount(&p)
		if msg, err = readMessage(r, maxConfigSize); err != nil {
			return Config{}, err
		}
	}
	var cfg Config
	err = cfg.UnmarshalBinary(msg)
	return cfg, err
}

// readMessage reads one length-prefixed message of at most limit bytes.
func readMessage(r io.Reader, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(head[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("message of %d bytes exceeds %d", n, limit)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, fmt.Errorf("message of %d bytes: %w", n, noEOF(err))
	}
	return msg, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// encoder appends a message: a 4-byte little-endian length, then the body.
type encoder struct{ b []byte }

func (e *encoder) begin(magic uint32) {
	e.b = make([]byte, 4, 512)
	e.b = binary.LittleEndian.AppendUint32(e.b, magic)
}

func (e *encoder) end(limit int) ([]byte, error) {
	n := len(e.b) - 4
	if n > limit {
		return nil, fmt.Errorf("message of %d bytes exceeds %d", n, limit)
	}
	binary.LittleEndian.PutUint32(e.b, uint32(n))
	return e.b, nil
}

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int)     { e.b = binary.AppendVarint(e.b, int64(v)) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) bytes(v []byte) {
	e.uint(uint64(len(v)))
	e.b = append(e.b, v...)
}

func (e *encoder) string(v string) {
	e.uint(uint64(len(v)))
	e.b = append(e.b, v...)
}

func (e *encoder) strings(v []string) {
	e.uint(uint64(len(v)))
	for _, s := range v {
		e.string(s)
	}
}

// decoder reads a message body. The first error sticks: every later read
// returns a zero value, and finish reports it.
type decoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated")

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) magic(want uint32) {
	if len(d.b) < 4 {
		d.fail(errTruncated)
		return
	}
	if got := binary.LittleEndian.Uint32(d.b); got != want {
		d.fail(fmt.Errorf("bad magic %#x, want %#x (a peer from another build?)", got, want))
		return
	}
	d.b = d.b[4:]
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d bytes left over", len(d.b))
	}
	return d.err
}

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint32() uint32 {
	v := d.uint()
	if v > math.MaxUint32 {
		d.fail(fmt.Errorf("value %d out of range", v))
		return 0
	}
	return uint32(v)
}

func (d *decoder) stage() Stage {
	v := d.uint()
	if v >= uint64(stageEnd) {
		d.fail(fmt.Errorf("unknown stage %d", v))
		return StageNone
	}
	return Stage(v)
}

func (d *decoder) int() int {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errTruncated)
		return 0
	}
	d.b = d.b[n:]
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(fmt.Errorf("value %d out of range", v))
		return 0
	}
	return int(v)
}

func (d *decoder) bool() bool {
	if len(d.b) == 0 {
		d.fail(errTruncated)
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	if v > 1 {
		d.fail(fmt.Errorf("bad boolean %d", v))
	}
	return v == 1
}

// count reads a number of elements: each takes at least a byte, so a count
// beyond the bytes left is refused before anything is allocated for it.
func (d *decoder) count() int {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail(fmt.Errorf("count %d exceeds the %d bytes left", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail(errTruncated)
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) strings() []string { return list(d, d.string) }

// list decodes a count and that many elements, each by elem; nil for none.
func list[T any](d *decoder, elem func() T) []T {
	n := d.count()
	if n == 0 {
		return nil
	}
	v := make([]T, n)
	for i := range v {
		v[i] = elem()
	}
	return v
}
