package ipc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fuzzSecret is the operator secret the fuzzed guest may have injected but
// must never see.
const fuzzSecret = "fuzz-secret-7c1d0b"

// fuzzOrigins are two real HTTP servers on 127.0.0.1, the only places a
// fuzzed guest can reach: the job declares them as literal IP origins, and
// the resolver refuses every name, so no input can make a request leave the
// machine.
type fuzzOrigins struct {
	authed, other *httptest.Server

	mu  sync.Mutex
	saw []string // "server method secret-header" per request received
}

func newFuzzOrigins(f *testing.F) *fuzzOrigins {
	o := &fuzzOrigins{}
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.mu.Lock()
			o.saw = append(o.saw, name+" "+r.Method+" "+r.Header.Get("X-Api-Key"))
			o.mu.Unlock()
			switch r.URL.Path {
			case "/redirect":
				http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			case "/big":
				w.Write(bytes.Repeat([]byte("x"), 8192))
			default:
				body, _ := io.ReadAll(io.LimitReader(r.Body, 1024))
				fmt.Fprintf(w, "%s %s %q", name, r.Method, body)
			}
		})
	}
	o.authed = httptest.NewServer(handler("authed"))
	o.other = httptest.NewServer(handler("other"))
	f.Cleanup(o.authed.Close)
	f.Cleanup(o.other.Close)
	return o
}

func (o *fuzzOrigins) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	saw := o.saw
	o.saw = nil
	return saw
}

// panicLog records any panic the session or the broker recovered from: each
// is logged at error level, and each is a bug a guest could trigger.
type panicLog struct {
	slog.Handler
	mu     sync.Mutex
	panics []string
}

func (h *panicLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "panic") {
		h.mu.Lock()
		h.panics = append(h.panics, r.Message)
		h.mu.Unlock()
	}
	return nil
}

// fuzzFrames joins bodies into the wire form, one frame each.
func fuzzFrames(bodies ...string) []byte {
	return []byte(strings.Join(bodies, "\x00"))
}

// FuzzSession plays a hostile guest against a whole session: the broker
// with the log and request capabilities and an injectable secret. The input
// is split at NUL bytes, each piece sent as one frame with a correct length
// header, so the fuzzer explores what frames say rather than their framing
// (FuzzReadFrame covers that). Whatever the guest sends, the session ends
// promptly without a panic, every request reaching a server is one the
// capability allows, and the secret goes only to its origin and never back
// to the guest.
func FuzzSession(f *testing.F) {
	origins := newFuzzOrigins(f)
	authed, other := origins.authed.URL, origins.other.URL

	call := func(id int, method, params string) string {
		return fmt.Sprintf(`{"type":"call","id":%d,"method":%q,"params":%s}`, id, method, params)
	}
	f.Add(fuzzFrames(call(1, "input.get", `null`), `{"type":"done","value":{"ok":true}}`))
	// A ready frame is a guest's first or nothing: once more, or after a
	// call, it is a breach.
	f.Add(fuzzFrames(`{"type":"ready"}`, call(1, "input.get", `null`), `{"type":"done"}`))
	f.Add(fuzzFrames(`{"type":"ready"}`, `{"type":"ready","id":1}`, `{"type":"done"}`))
	f.Add(fuzzFrames(call(1, "log.info", `{"message":"m"}`), `{"type":"ready"}`))
	f.Add(fuzzFrames(
		call(1, "log.info", `{"message":"hi","meta":{"a":[1,2]}}`),
		call(2, "log.warn", `{"message":7}`),
		`{"type":"error","error":{"name":"Error","message":"boom"}}`))
	f.Add(fuzzFrames(
		call(1, "request.send", `{"url":"`+authed+`/x","auth":"api"}`),
		call(2, "request.send", `{"url":"`+authed+`/x","method":"post","body":"b","headers":{"X-A":"1"}}`),
		call(3, "request.send", `{"url":"`+other+`/x","auth":"api"}`),
		call(4, "request.send", `{"url":"`+authed+`/x","auth":"api","headers":{"x-api-key":"mine"}}`),
		`{"type":"done"}`))
	f.Add(fuzzFrames(
		call(1, "request.send", `{"url":"`+authed+`/redirect?to=`+other+`/y","auth":"api"}`),
		call(2, "request.send", `{"url":"`+other+`/redirect?to=http://169.254.169.254/"}`),
		call(3, "request.send", `{"url":"`+authed+`/big","method":"DELETE","timeout_ms":50}`),
		call(4, "request.send", `{"url":"http://example.invalid/"}`),
		`{"type":"done","value":null}`))
	f.Add(fuzzFrames(call(1, "request.send", `{"url":"`+authed+`/","timeout_ms":-1}`), call(1, "input.get", `{}`), ``, `[`))
	f.Add(fuzzFrames(call(9007199254740991, "nope", `{}`), `{"type":"call","id":"1","method":"input.get"}`))
	f.Add(fuzzFrames(
		`{"type":"note","method":"log.info","params":{"message":"n"}}`,
		`{"type":"note","method":"log.debug","params":{"message":"`+fuzzSecret+`","meta":[[[1]]]}}`,
		`{"type":"note","method":"request.send","params":{"url":"`+authed+`/"}}`,
		`{"type":"done"}`))

	caps := Capabilities{Log: true, Request: &RequestCapability{
		URLs:    []string{authed, other},
		Methods: []string{"GET", "POST", "DELETE"},
		Auth:    map[string]string{authed: "api"},
	}}
	ceil := PermissiveCeiling()
	ceil.Secrets = map[string]Secret{"api": {Header: "X-Api-Key", Value: fuzzSecret, Origins: []string{authed}}}
	ceil.MaxResponseBytes = 4096
	ceil.RequestTimeout = time.Second
	ceil.FrameTimeout = time.Second
	ceil.WriteTimeout = time.Second
	ceil.MaxCalls = 64
	ceil.MaxLogs = 16
	ceil.MaxLogBytes = 4096
	if err := caps.Validate(); err != nil {
		f.Fatal(err)
	}
	if err := caps.Within(ceil); err != nil {
		f.Fatal(err)
	}
	noNames := ResolverFunc(func(context.Context, string) ([]netip.Addr, error) {
		return nil, errors.New("fuzz: no name resolves")
	})

	f.Fuzz(func(t *testing.T, data []byte) {
		logs := &panicLog{Handler: slog.DiscardHandler}
		host, guest := socketPair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		// The guest keeps everything the host sends it. It writes its
		// frames in turn, but before any that is not a call (done, say)
		// and before it half-closes, as a guest that exits does, it waits
		// for a reply to each call so far: ending the session at once
		// would cancel its requests before they were sent.
		var seen bytes.Buffer
		var replies atomic.Int64
		replied := make(chan struct{}, 1)
		read := make(chan struct{})
		go func() {
			defer close(read)
			r := io.TeeReader(guest, &seen)
			for {
				body, err := ReadFrame(r, DefaultMaxFrame)
				if err != nil {
					_, _ = io.Copy(io.Discard, r)
					return
				}
				var f hostFrame
				if json.Unmarshal(body, &f) == nil && f.Type == typeReply {
					replies.Add(1)
					select {
					case replied <- struct{}{}:
					default:
					}
				}
			}
		}()
		written := make(chan struct{})
		go func() {
			defer close(written)
			var calls int64
			giveUp := time.After(3 * time.Second)
			// awaitReplies reports whether the session is still there.
			awaitReplies := func() bool {
				for replies.Load() < calls {
					select {
					case <-replied:
					case <-read:
						return false
					case <-giveUp:
						t.Errorf("%d of %d calls answered after 3s", replies.Load(), calls)
						calls = 0
					}
				}
				return true
			}
			for body := range bytes.SplitSeq(data, []byte{0}) {
				var f guestFrame
				isCall := json.Unmarshal(body, &f) == nil && f.Type == typeCall
				if !isCall && !awaitReplies() {
					return
				}
				frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
				if _, err := guest.Write(append(frame, body...)); err != nil {
					return
				}
				if isCall {
					calls++
				}
			}
			if awaitReplies() {
				_ = guest.(*net.UnixConn).CloseWrite()
			}
		}()

		began := time.Now()
		out := Serve(ctx, host, SessionConfig{
			Input: []byte(`{"n":1}`), Capabilities: caps, Ceiling: ceil,
			Logger: slog.New(logs), Resolver: noNames,
		})
		if took := time.Since(began); took > 4*time.Second {
			t.Errorf("Serve took %s", took.Round(time.Millisecond))
		}
		host.Close()
		<-read
		<-written

		if out.HostError != nil {
			t.Errorf("host error: %v", out.HostError)
		}
		if len(logs.panics) > 0 {
			t.Errorf("recovered panics: %q", logs.panics)
		}
		if out.ProtocolError != nil && !errors.Is(out.ProtocolError, ErrProtocol) && !errors.Is(out.ProtocolError, ErrFrameTooLarge) {
			t.Errorf("protocol error %v wraps neither ErrProtocol nor ErrFrameTooLarge", out.ProtocolError)
		}
		if len(out.Logs) > ceil.MaxLogs {
			t.Errorf("%d logs kept, over the ceiling's %d", len(out.Logs), ceil.MaxLogs)
		}
		if bytes.Contains(seen.Bytes(), []byte(fuzzSecret)) {
			t.Errorf("the secret reached the guest")
		}
		for _, req := range origins.take() {
			server, rest, _ := strings.Cut(req, " ")
			method, key, _ := strings.Cut(rest, " ")
			if !slices.Contains(caps.Request.Methods, method) {
				t.Errorf("%s received a %s request, which the capability does not allow", server, method)
			}
			// Elsewhere the guest may set the header itself; on the
			// secret's origin only the broker may.
			if key == fuzzSecret && server != "authed" || server == "authed" && key != "" && key != fuzzSecret {
				t.Errorf("%s received X-Api-Key %q", server, key)
			}
		}
	})
}

// validJSON stands in for json.Valid on the start frame's input: it must
// agree with it on every input, or the check would have changed.
func FuzzValidJSON(f *testing.F) {
	for _, seed := range []string{
		``, ` `, `1`, ` {"a":1} `, `{"a":1,"a":2}`, `1 2`, `{"a":`, `"\ud800"`, "\"\xff\"",
		`[1,]`, `{"a":1,}`, `-0.5e+3`, `01`, `"\u00zz"`, `nul`, `[[[]]]`, "\t\n\r[]",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("%q: validJSON %v, json.Valid %v", b, got, want)
		}
	})
}
