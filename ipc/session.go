package ipc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pmjail/pmjail/internal/jsonstr"
)

// SessionConfig is everything Serve needs about one run.
type SessionConfig struct {
	// Input is the job's input, sent in the start frame and by input.get.
	Input json.RawMessage
	// Capabilities as the job declared them; Validate and Within must have
	// passed.
	Capabilities Capabilities
	// Ceiling is the operator's; zero limits take their defaults.
	Ceiling Ceiling
	// Timing is passed to the guest: "precise" (default) or "coarse".
	Timing string
	// Source, when set, goes in the start frame: the program of a runtime
	// started before its job (a warm runtime).
	Source *StartSource
	// OnLog, if set, sees every log entry the broker accepts, as it comes.
	OnLog func(Log)
	// Logger receives the supervisor's own account of the session.
	Logger *slog.Logger
	// Resolver resolves request host names; nil means net.DefaultResolver.
	Resolver Resolver
	// RootCAs verifies HTTPS servers; nil means the host's roots.
	RootCAs *x509.CertPool
	// ReplyBudget bounds what the run's broker replies hold at once; nil
	// means a budget of its own (DefaultReplyBudget, or one largest reply).
	ReplyBudget *Budget
	// ReadySeen says the guest's ready frame was read already (AwaitReady,
	// by a warm pool): the session then refuses one as it refuses any
	// ready frame after the first.
	ReadySeen bool
	// OnExit, if set, hears a guest's exit frame: the code its runtime is
	// exiting with, sent when nothing of the guest's code is left to run.
	// The supervisor may then end the jail at once rather than wait for
	// the runtime's own teardown. The session ends with the frame.
	OnExit func(code int)
}

// Outcome is how a session ended and what it gathered.
type Outcome struct {
	// Done: the guest sent done; Value is what it returned (nil if nothing).
	Done  bool
	Value json.RawMessage
	// Error: the guest sent error (its code threw), or its done value broke
	// a host rule (Name "ResultError").
	Error *GuestError
	// Logs the broker accepted, in order, and how many it refused for caps.
	Logs        []Log
	LogsDropped int
	// Calls is the number of call frames received, refused ones included.
	Calls int
	// Denied counts calls answered "denied", by method.
	Denied map[string]int
	// ProtocolError is set when the guest broke the protocol (including a
	// frame that never finished, or not reading replies for WriteTimeout);
	// it wraps ErrProtocol. The run should end with status protocol_error.
	ProtocolError error
	// HostError is set when the host side itself failed (a recovered panic
	// in the session loop); the run should end with status internal_error.
	HostError error
}

// session is one run's channel state.
type session struct {
	conn   net.Conn
	br     *bufio.Reader
	cfg    SessionConfig
	ceil   Ceiling
	log    *slog.Logger
	broker *broker

	ctx    context.Context // ends when Serve returns; cancels in-flight calls
	cancel context.CancelFunc
	wg     sync.WaitGroup

	dlMu    sync.Mutex // orders deadline changes against stop
	stopped bool

	wMu sync.Mutex // one frame at a time on the wire

	mu       sync.Mutex // guards everything below
	out      Outcome
	inflight map[uint64]bool
	// held is what the in-flight request.send calls hold of their bodies
	// and URLs (maxHeldInFlight).
	held     int64
	logBytes int
	// decoded counts the bytes of the frames read whole (MaxGuestBytes),
	// each at least minFrameCharge.
	decoded int64
	// past counts the calls and notes read by their heads past that
	// budget (maxFramesPastBudget).
	past    int
	failure error // why a writer or call stopped the session
}

var errStopped = errors.New("session stopped")

// Serve sends the start frame, then serves the guest's frames until it sends
// done or error, the conn reaches EOF, ctx ends, or the guest breaks the
// protocol (ProtocolError is set). It returns promptly in every case, after
// every goroutine it started has finished. It never closes conn, but leaves
// its deadlines in the past: the caller closes it.
func Serve(ctx context.Context, conn net.Conn, cfg SessionConfig) (out Outcome) {
	s := newSession(ctx, conn, cfg)
	stopOnCancel := context.AfterFunc(ctx, s.stop)
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ipc session panic", "panic", r, "stack", string(debug.Stack()))
			s.mu.Lock()
			s.out.HostError = fmt.Errorf("ipc session: panic: %v", r)
			s.mu.Unlock()
		}
		stopOnCancel()
		s.stop()
		s.cancel()
		s.wg.Wait()
		s.broker.closeTransports()
		if s.out.ProtocolError == nil && errors.Is(s.failure, ErrProtocol) {
			s.out.ProtocolError = s.failure
		}
		if s.out.ProtocolError != nil {
			s.log.Warn("ipc protocol error", "err", s.out.ProtocolError)
		}
		out = s.out // every writer has finished
	}()

	input := cfg.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	timing := cfg.Timing
	if timing == "" {
		timing = "precise"
	}
	frame, err := appendStart(nil, input, startFrame{Type: typeStart, Capabilities: cfg.Capabilities, Options: startOptions{Timing: timing, MaxFrame: s.ceil.MaxFrame}, Source: cfg.Source}, s.ceil.MaxFrame)
	if err != nil {
		// The job's input is the host's business, not a guest breach.
		s.out.HostError = fmt.Errorf("start frame: %w", err)
		return
	}
	if err := s.write(frame); err != nil {
		s.end(err)
		return
	}
	// The guest's first frame may be its ready frame, written before it
	// read the start frame; it says nothing the session needs.
	readyDue := !cfg.ReadySeen
	for {
		body, err := s.readFrame()
		first := readyDue
		readyDue = false
		if big, ok := errors.AsType[*FrameTooLargeError](err); ok {
			err = s.skipOversized(big)
			if err == nil {
				continue
			}
		}
		if spent, ok := errors.AsType[*overBudgetError](err); ok {
			body, err = s.skipOverBudget(spent.length)
			if err == nil && body == nil {
				continue
			}
		}
		if err != nil {
			s.end(err)
			return
		}
		if first && isReady(body) {
			continue
		}
		if last := s.handle(body); last {
			return
		}
	}
}

// appendStart appends the start frame: start with input spliced in as
// given. A megabyte of input would cost json.Marshal twice what checking
// it costs (Marshal validates, compacts and escapes a RawMessage in one
// slow pass); the guest's JSON.parse reads the same value either way.
// Input that is not JSON is refused, as Marshal refuses it.
func appendStart(dst []byte, input json.RawMessage, start startFrame, max int) ([]byte, error) {
	if !validJSON(input) {
		return dst, fmt.Errorf("encode frame: the input is not JSON")
	}
	rest, err := json.Marshal(start) // {"type":"start","input":null,...}
	if err != nil {
		return dst, fmt.Errorf("encode frame: %w", err)
	}
	const head = `{"type":"` + typeStart + `","input":null`
	if !bytes.HasPrefix(rest, []byte(head)) {
		return dst, fmt.Errorf("encode frame: the start frame begins %.40q", rest)
	}
	rest = rest[len(head):]
	n := len(head) - len("null") + len(input) + len(rest)
	if n > max {
		return dst, fmt.Errorf("encode frame: %d bytes over the %d-byte cap: %w", n, max, ErrFrameTooLarge)
	}
	dst = slices.Grow(dst, 4+n) // the input copied once, not again as dst grows
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, head[:len(head)-len("null")]...)
	dst = append(dst, input...)
	return append(dst, rest...), nil
}

func newSession(ctx context.Context, conn net.Conn, cfg SessionConfig) *session {
	s := &session{
		conn:     conn,
		cfg:      cfg,
		ceil:     cfg.Ceiling.WithDefaults(),
		log:      cfg.Logger,
		inflight: map[uint64]bool{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.br = bufio.NewReaderSize(conn, 64<<10)
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.out.Denied = map[string]int{}
	s.broker = newBroker(cfg, s.ceil)
	s.broker.budget = cfg.ReplyBudget
	if s.broker.budget == nil {
		s.broker.budget = replyBudget(s.ceil)
	}
	return s
}

// readFrame waits as long as it takes for a frame to start, then gives it
// FrameTimeout to finish: a guest may think for a long time between calls
// (the run's wall timeout bounds that), but a half-sent frame is an attack
// on the reader or a broken guest.
func (s *session) readFrame() ([]byte, error) {
	if !s.setDeadline(s.conn.SetReadDeadline, time.Time{}) {
		return nil, errStopped
	}
	if _, err := s.br.Peek(1); err != nil {
		return nil, err
	}
	if !s.setDeadline(s.conn.SetReadDeadline, time.Now().Add(s.ceil.FrameTimeout)) {
		return nil, errStopped
	}
	// From the frame that would pass the budget on, a frame within the
	// cap is read by its head only (skipOverBudget); errors of a short
	// header are ReadFrame's to say.
	if hdr, err := s.br.Peek(headerLen); err == nil {
		n := int64(binary.BigEndian.Uint32(hdr))
		if n <= int64(s.ceil.MaxFrame) && s.decoded+frameCharge(n) > s.ceil.MaxGuestBytes {
			s.decoded = s.ceil.MaxGuestBytes // spent: smaller frames do not slip in
			return nil, &overBudgetError{length: int(n)}
		}
	}
	body, err := ReadFrame(s.br, s.ceil.MaxFrame)
	s.decoded += frameCharge(int64(len(body)))
	return body, err
}

// minFrameCharge is the least a frame read whole counts against
// MaxGuestBytes. A frame costs the host a decoding and a dispatch however
// small it is, and the guest next to nothing (a buffer of a thousand
// frames is one write): 64 MiB of 60-byte notes took the daemon 2 s. A
// run's thousand calls and logs count half a megabyte.
const minFrameCharge = 512

// frameCharge is what a frame of an n-byte body counts against
// MaxGuestBytes.
func frameCharge(n int64) int64 { return max(headerLen+n, minFrameCharge) }

// end records why reading stopped.
func (s *session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.failure != nil:
		if errors.Is(s.failure, ErrProtocol) {
			s.out.ProtocolError = s.failure
		}
		s.log.Debug("ipc session ended", "reason", s.failure)
	case s.ctx.Err() != nil:
		s.log.Debug("ipc session cancelled", "reason", context.Cause(s.ctx))
	case errors.Is(err, io.EOF):
		s.log.Debug("ipc session: guest closed the channel")
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.out.ProtocolError = fmt.Errorf("%w: a frame started but did not finish within %s: %w", ErrProtocol, s.ceil.FrameTimeout, err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrProtocol):
		if !errors.Is(err, ErrProtocol) {
			err = fmt.Errorf("%w: %w", ErrProtocol, err)
		}
		s.out.ProtocolError = err
	default:
		// A socket error (the guest's end vanished): not the guest's protocol
		// breach, the run's exit status tells the story.
		s.log.Debug("ipc session: channel failed", "err", err)
	}
}

// protocolError stops the session for a guest's breach of the rules.
func (s *session) protocolError(format string, args ...any) {
	s.fail(fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...))
}

// fail records the first reason to stop and unblocks everything.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.failure == nil {
		s.failure = err
	}
	s.mu.Unlock()
	s.stop()
}

// stop puts the conn's deadlines in the past so every blocked read or write
// returns at once, and keeps them there.
func (s *session) stop() {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	past := time.Unix(1, 0)
	_ = s.conn.SetReadDeadline(past)
	_ = s.conn.SetWriteDeadline(past)
}

// setDeadline sets a deadline unless the session has stopped, in which case
// it reports false (and the deadline stays in the past).
func (s *session) setDeadline(set func(time.Time) error, t time.Time) bool {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	if s.stopped {
		return false
	}
	_ = set(t)
	return true
}

// joinUnder is the size under which a frame given in pieces is copied
// into one buffer and written whole. The conn is a FIFO, where each piece
// is a write(2) of its own, and a guest waiting in an asynchronous read
// wakes on the first: a reply in three pieces cost it three wake-ups, a
// thread hop each, where one write costs one. Above it the copy would
// cost more than the reads it saves (a pipe holds 64 KiB anyway).
const joinUnder = 64 << 10

// write sends one encoded frame, given whole or in consecutive pieces,
// giving the guest WriteTimeout to take it.
func (s *session) write(frame ...[]byte) error {
	if len(frame) > 1 {
		size := 0
		for _, p := range frame {
			size += len(p)
		}
		if size <= joinUnder {
			frame = [][]byte{slices.Concat(frame...)}
		}
	}
	s.wMu.Lock()
	defer s.wMu.Unlock()
	if !s.setDeadline(s.conn.SetWriteDeadline, time.Now().Add(s.ceil.WriteTimeout)) {
		return errStopped
	}
	pieces := net.Buffers(frame)
	if _, err := pieces.WriteTo(s.conn); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && !s.isStopped() {
			err = fmt.Errorf("%w: the guest did not read a frame for %s", ErrProtocol, s.ceil.WriteTimeout)
		} else {
			err = fmt.Errorf("write frame: %w", err)
		}
		s.fail(err)
		return err
	}
	return nil
}

func (s *session) isStopped() bool {
	s.dlMu.Lock()
	defer s.dlMu.Unlock()
	return s.stopped
}

// reply answers call id. A value too big for a frame becomes too_large.
func (s *session) reply(id uint64, method string, value json.RawMessage, cerr *CallError) {
	s.replyCredit(id, method, value, cerr, nil)
}

// replyCredit is reply with a log credit on a successful reply.
func (s *session) replyCredit(id uint64, method string, value json.RawMessage, cerr *CallError, credit *logCredit) {
	rf := replyFrame{Type: typeReply, ID: id, OK: cerr == nil, Value: value, Error: cerr, Credit: credit}
	frame, err := AppendFrame(nil, rf, s.ceil.MaxFrame)
	if errors.Is(err, ErrFrameTooLarge) {
		cerr = callErr(CodeTooLarge, "the reply would exceed the %d-byte frame cap", s.ceil.MaxFrame)
		rf = replyFrame{Type: typeReply, ID: id, Error: cerr}
		frame, err = AppendFrame(nil, rf, s.ceil.MaxFrame)
	}
	if err != nil {
		cerr = callErr(CodeInternal, "encode reply")
		s.log.Error("ipc reply encode", "method", method, "err", err)
		frame, _ = AppendFrame(nil, replyFrame{Type: typeReply, ID: id, Error: cerr}, s.ceil.MaxFrame)
	}
	if cerr != nil && cerr.Code == CodeDenied {
		s.mu.Lock()
		s.out.Denied[method]++
		s.mu.Unlock()
		s.log.Debug("ipc call denied", "method", method, "reason", cerr.Message)
	}
	_ = s.write(frame) // a failure has already stopped the session
}

// handle processes one guest frame and reports whether it was the last.
func (s *session) handle(body []byte) bool {
	var f guestFrame
	if err := json.Unmarshal(body, &f); err != nil {
		s.protocolError("undecodable frame: %v", err)
		return true
	}
	switch f.Type {
	case typeCall:
		s.handleCall(&f)
		return false
	case typeNote:
		s.handleNote(&f)
		return false
	case typeDone:
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := checkValueDepth(f.Value); err != nil {
			s.out.Error = &GuestError{Name: "ResultError", Message: fmt.Sprintf("pmjail: the returned value %v", err)}
			return true
		}
		if n, limit := htmlSafeLen(f.Value), s.ceil.MaxFrame-len(doneWrapper); n > limit {
			s.out.Error = &GuestError{Name: "ResultError", Message: fmt.Sprintf("pmjail: the returned value is %d bytes as JSON, over the %d-byte limit on a result's value", n, limit)}
			return true
		}
		s.out.Done = true
		if len(f.Value) > 0 {
			s.out.Value = f.Value
		}
		return true
	case typeError:
		if f.Error == nil {
			s.protocolError("error frame without an error object")
			return true
		}
		for e := f.Error; e != nil; e = e.Cause {
			// A value too deep to pass on is dropped; the error stands.
			if len(e.Value) > 0 && checkValueDepth(e.Value) != nil {
				e.Value = nil
			}
		}
		if n := guestErrorLen(f.Error); n > s.ceil.MaxFrame {
			f.Error = &GuestError{Name: "ResultError", Message: fmt.Sprintf("pmjail: the error the guest reported is %d bytes as JSON, over the %d-byte limit", n, s.ceil.MaxFrame)}
		}
		s.mu.Lock()
		s.out.Error = f.Error
		s.mu.Unlock()
		return true
	case typeReady:
		s.protocolError("a ready frame must be the guest's first, and come once")
		return true
	case typeExit:
		if f.Code == nil || *f.Code < 0 || *f.Code > 255 {
			s.protocolError("an exit frame's code must be an integer from 0 to 255")
			return true
		}
		if s.cfg.OnExit != nil {
			s.cfg.OnExit(*f.Code)
		}
		return true
	default:
		s.protocolError("unknown frame type %.80q", f.Type)
		return true
	}
}

// maxCallID is the largest integer a JavaScript number holds exactly.
const maxCallID = 1<<53 - 1

// admitCall checks a call's id and method and counts it against the run's
// budget. It reports false when the call has been dealt with already: a
// protocol error, or a rate_limited reply.
func (s *session) admitCall(rawID json.RawMessage, method string) (uint64, bool) {
	id, err := strconv.ParseUint(string(rawID), 10, 64)
	if err != nil || id == 0 || id > maxCallID {
		s.protocolError("call id %.40q is not a positive integer", rawID)
		return 0, false
	}
	if method == "" {
		s.protocolError("call %d has no method", id)
		return 0, false
	}
	s.mu.Lock()
	s.out.Calls++
	over := s.out.Calls > s.ceil.MaxCalls
	dup := s.inflight[id]
	s.mu.Unlock()
	if dup {
		s.protocolError("call id %d is already in flight", id)
		return 0, false
	}
	if over {
		s.reply(id, method, nil, callErr(CodeRateLimited, "more than %d broker calls in this run", s.ceil.MaxCalls))
		return 0, false
	}
	return id, true
}

func (s *session) handleCall(f *guestFrame) {
	id, ok := s.admitCall(f.ID, f.Method)
	if !ok {
		return
	}
	if err := checkValueDepth(f.Params); err != nil {
		s.reply(id, f.Method, nil, callErr(CodeInvalidRequest, "params %v", err))
		return
	}
	switch f.Method {
	case "input.get":
		// Checked once (appendStart) and spliced in as the start frame
		// splices it: encoding a megabyte of input anew for each of a
		// run's calls would cost the daemon ~10 ms a call, the guest a
		// copy.
		input := s.cfg.Input
		if len(input) == 0 {
			input = json.RawMessage("null")
		}
		s.replyRaw(id, f.Method, input)
	case "log.debug", "log.info", "log.warn", "log.error":
		value, cerr := s.recovered(f.Method, func() (json.RawMessage, *CallError) { return s.handleLog(f.Method[len("log."):], f.Params) })
		if s.ctx.Err() != nil {
			return
		}
		var credit *logCredit
		if cerr == nil {
			credit = s.logCredit()
		}
		s.replyCredit(id, f.Method, value, cerr, credit)
	case "request.send":
		if s.cfg.Capabilities.Request == nil {
			s.reply(id, f.Method, nil, callErr(CodeDenied, "the job did not declare the request capability"))
			return
		}
		s.mu.Lock()
		busy := len(s.inflight) >= s.ceil.MaxInFlight
		s.mu.Unlock()
		if busy {
			s.reply(id, f.Method, nil, callErr(CodeRateLimited, "more than %d requests in flight", s.ceil.MaxInFlight))
			return
		}
		// The checks run here, in the read loop (they never wait): a
		// refused call is answered at once, without a goroutine, whose
		// hand-off wakes another thread on a machine the guest shares.
		var call *sendCall
		_, cerr := s.recovered(f.Method, func() (json.RawMessage, *CallError) {
			var cerr *CallError
			call, cerr = s.broker.prepare(f.Params)
			return nil, cerr
		})
		if s.ctx.Err() != nil {
			return
		}
		if cerr != nil {
			s.reply(id, f.Method, nil, cerr)
			return
		}
		// A body and a URL are held until their call ends, however slow
		// its origin: what the calls in flight hold is bounded as their
		// replies are (the reply budget), or a run's sixteen calls of a
		// frame each hold 64 MiB, or 260 MiB of URLs. Refused at once, as
		// the in-flight count is.
		size := call.held()
		limit := max(int64(maxHeldInFlight), urlCopies*int64(s.ceil.MaxFrame))
		// Only the read loop adds to inflight and held: the slot seen
		// free above is still free.
		s.mu.Lock()
		over := s.held+size > limit
		if !over {
			s.inflight[id] = true
			s.held += size
		}
		s.mu.Unlock()
		if over {
			s.reply(id, f.Method, nil, callErr(CodeRateLimited, "the requests in flight would hold more than %d bytes of bodies and URLs", limit))
			return
		}
		// The goroutine keeps the call and not the frame: its params,
		// as large as the body, are garbage once prepared.
		method := f.Method
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.inflight, id)
				s.held -= size
				s.mu.Unlock()
			}()
			value, cerr := s.recovered(method, func() (json.RawMessage, *CallError) { return s.broker.exchange(s.ctx, call) })
			switch {
			case s.ctx.Err() != nil:
				s.broker.budget.Release(int64(len(value))) // nobody reads this reply
			case cerr != nil:
				s.reply(id, method, nil, cerr)
			default:
				s.replyValue(id, method, value)
			}
		})
	default:
		s.reply(id, f.Method, nil, callErr(CodeUnsupported, "unknown method %.80q", f.Method))
	}
}

// recovered runs one broker call, turning a panic into an internal error.
func (s *session) recovered(method string, call func() (json.RawMessage, *CallError)) (v json.RawMessage, cerr *CallError) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("ipc broker panic", "method", method, "panic", r, "stack", string(debug.Stack()))
			v, cerr = nil, callErr(CodeInternal, "the broker failed")
		}
	}()
	return call()
}

// handleNote takes a log call sent as a note: checked, counted and kept
// exactly as a call, but not answered. The guest sends one only within
// the credit of an earlier reply, which promised it would be accepted;
// one that is refused anyway (a guest writing its own frames) is counted
// as the call would have been and dropped, since nobody waits for it.
func (s *session) handleNote(f *guestFrame) {
	switch f.Method {
	case "log.debug", "log.info", "log.warn", "log.error":
	default:
		s.protocolError("a note for %.80q: only log methods take one", f.Method)
		return
	}
	s.mu.Lock()
	s.out.Calls++
	over := s.out.Calls > s.ceil.MaxCalls
	s.mu.Unlock()
	var cerr *CallError
	switch {
	case over:
		cerr = callErr(CodeRateLimited, "more than %d broker calls in this run", s.ceil.MaxCalls)
	case checkValueDepth(f.Params) != nil:
		cerr = callErr(CodeInvalidRequest, "params nest too deeply")
	default:
		_, cerr = s.recovered(f.Method, func() (json.RawMessage, *CallError) { return s.handleLog(f.Method[len("log."):], f.Params) })
	}
	if cerr != nil {
		if cerr.Code == CodeDenied {
			s.mu.Lock()
			s.out.Denied[f.Method]++
			s.mu.Unlock()
		}
		s.log.Debug("ipc note refused", "method", f.Method, "code", cerr.Code, "reason", cerr.Message)
	}
}

// logCredit is the credit an accepted log call's reply carries, or nil
// when the scrubber could make a message longer than the guest counts.
func (s *session) logCredit() *logCredit {
	if len(s.broker.scrubber.forms) > 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &logCredit{
		Calls:   max(0, s.ceil.MaxCalls-s.out.Calls),
		Logs:    max(0, s.ceil.MaxLogs-len(s.out.Logs)),
		Bytes:   max(0, s.ceil.MaxLogBytes-s.logBytes),
		Message: s.ceil.MaxLogMessage,
		Frame:   s.ceil.MaxFrame,
	}
}

// doneWrapper is a done frame's JSON around its value: the guest's
// bootstraps bound a value by the frame cap less this.
const doneWrapper = `{"type":"done","value":}`

// htmlSafeLen is the length of the JSON text raw as encoding/json writes
// it into a result (HTML-safe: <, > and & as \u003c, U+2028 and U+2029 as
// \u2028), at most: a frame holds them unescaped, one to three bytes for
// six, so the frame cap alone let a guest's value take six times it in
// every copy of its result the daemon builds, holds and stores.
func htmlSafeLen(raw []byte) int {
	n := len(raw)
	for i, b := range raw {
		switch {
		case b == '<' || b == '>' || b == '&':
			n += 5
		case b == 0xe2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xa8 || raw[i+2] == 0xa9):
			n += 3
		}
	}
	return n
}

// guestErrorLen is the length of what a result holds of g, its causes
// included, as JSON: its strings escaped, its values HTML-safe.
func guestErrorLen(g *GuestError) int {
	n := 0
	for e := g; e != nil; e = e.Cause {
		n += jsonstr.Len(e.Name) + jsonstr.Len(e.Message) + jsonstr.Len(e.Stack) + htmlSafeLen(e.Value)
	}
	return n
}
