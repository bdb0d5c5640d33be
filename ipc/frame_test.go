package ipc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func frameBytes(body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func TestFrameRoundTripUnicode(t *testing.T) {
	v := map[string]any{"type": "done", "value": map[string]any{
		"text": "héllo wörld — 日本語 🦀 \u2028 \"quoted\" \\ back",
		"list": []any{1.5, "ß", nil, true},
	}}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, v); err != nil {
		t.Fatal(err)
	}
	body, err := ReadFrame(&buf, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(v)
	gotJSON, _ := json.Marshal(got)
	if !bytes.Equal(want, gotJSON) {
		t.Fatalf("round trip changed the value:\n%s\n%s", want, gotJSON)
	}
	if _, err := ReadFrame(&buf, DefaultMaxFrame); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameRejects(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, 100<<20)
	for _, tc := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"100 MiB header", huge, ErrFrameTooLarge},
		{"max uint32 header", []byte{0xff, 0xff, 0xff, 0xff}, ErrFrameTooLarge},
		{"zero length", []byte{0, 0, 0, 0}, ErrProtocol},
		{"invalid JSON", frameBytes(`{"type":`), ErrProtocol},
		{"not an object", frameBytes(`[1,2]`), ErrProtocol},
		{"a bare string", frameBytes(`"call"`), ErrProtocol},
		{"two objects", frameBytes(`{}{}`), ErrProtocol},
		{"invalid UTF-8", frameBytes("{\"a\":\"\xff\xfe\"}"), ErrProtocol},
		{"too deep", frameBytes(`{"v":` + nested(MaxFrameDepth+5) + `}`), ErrTooDeep},
		{"truncated body", frameBytes(`{"type":"done"}`)[:10], io.ErrUnexpectedEOF},
		{"truncated header", []byte{0, 0}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(bytes.NewReader(tc.input), DefaultMaxFrame)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadFrameAcceptsBracketsInStrings(t *testing.T) {
	body := `{"v":"` + strings.Repeat("[{", 500) + `\"]"}`
	if _, err := ReadFrame(bytes.NewReader(frameBytes(body)), DefaultMaxFrame); err != nil {
		t.Fatal(err)
	}
}

func TestWriteFrameCap(t *testing.T) {
	err := WriteFrame(io.Discard, map[string]string{"v": strings.Repeat("x", DefaultMaxFrame)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frameBytes(`{"type":"call","id":1,"method":"log.info","params":{"message":"hi"}}`))
	f.Add(frameBytes(`{"type":"done","value":` + nested(70) + `}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add(frameBytes("{\"a\":\"\\\"[\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 16
		r := bytes.NewReader(data)
		for {
			body, err := ReadFrame(r, max)
			if err != nil {
				return
			}
			if len(body) == 0 || len(body) > max || !json.Valid(body) || firstNonSpace(body) != '{' {
				t.Fatalf("ReadFrame accepted %q", body)
			}
			var f guestFrame
			_ = json.Unmarshal(body, &f) // the session's next step must not panic either
		}
	})
}

func BenchmarkFrameEncodeDecode(b *testing.B) {
	v := map[string]any{"type": "call", "id": 7, "method": "log.info",
		"params": map[string]any{"message": "benchmark message with some text", "meta": map[string]int{"a": 1, "b": 2}}}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := WriteFrame(&buf, v); err != nil {
			b.Fatal(err)
		}
		if _, err := ReadFrame(&buf, DefaultMaxFrame); err != nil {
			b.Fatal(err)
		}
	}
}
