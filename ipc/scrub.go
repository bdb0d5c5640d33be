package ipc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// minSecretPart is the shortest word of a secret's value scrubbed on its
// own: "Bearer" or "Basic" must not be, the token after it must.
const minSecretPart = 8

// redacted replaces a secret wherever the broker finds one.
const redacted = "[redacted]"

// scrubber removes secret values from what goes back to the guest or into a
// log. It is the second line: the first is that a secret goes only to its
// own origins. It finds the value and each long word of it (the token of
// "Bearer TOKEN") as they are and in the encodings an echoing server is
// likely to use (JSON and Go quoting, URL escaping, base64); an origin that
// transforms the value otherwise can still return it, which is why the
// operator names the origins a secret may go to.
type scrubber struct {
	forms []string // longest first, so a form inside another goes last
}

func newScrubber(secrets map[string]Secret) *scrubber {
	seen := map[string]bool{}
	var forms []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			forms = append(forms, s)
		}
	}
	for _, s := range secrets {
		words := []string{s.Value}
		for _, w := range strings.Fields(s.Value) {
			if len(w) >= minSecretPart {
				words = append(words, w)
			}
		}
		for _, w := range words {
			add(w)
			if q, err := json.Marshal(w); err == nil {
				j := string(q[1 : len(q)-1])
				add(j)
				// PHP's json_encode writes '/' as `\/`, with <, > and &
				// as they are.
				add(strings.ReplaceAll(j, "/", `\/`))
				add(strings.ReplaceAll(strings.Trim(strconv.Quote(w), `"`), "/", `\/`))
			}
			add(strings.Trim(strconv.Quote(w), `"`))
			add(strings.Trim(strconv.QuoteToASCII(w), `"`))
			add(url.QueryEscape(w))
			add(url.PathEscape(w))
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				add(enc.EncodeToString([]byte(w)))
			}
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				for shift := range 3 {
					add(base64Inside(enc, w, shift))
				}
			}
		}
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return &scrubber{forms: forms}
}

// base64Inside is what w encodes to inside a longer base64 text, where
// it starts shift bytes (0 to 2) into a group of three: the characters
// that hold only w's bits, without those shared with the bytes before
// and after it, which the text's other bytes decide. An origin that
// hands back a dump of the request base64-encoded puts the secret at
// whatever offset it falls.
func base64Inside(enc *base64.Encoding, w string, shift int) string {
	if len(w) < minSecretPart {
		return ""
	}
	e := enc.EncodeToString(append(make([]byte, shift), w...))
	from := (8*shift + 5) / 6      // the first character of w's bits alone
	to := 8 * (shift + len(w)) / 6 // past the last character wholly w's
	return e[from:to]
}

// scrub returns s with every form of every secret replaced.
func (sc *scrubber) scrub(s string) string {
	for _, f := range sc.forms {
		if strings.Contains(s, f) {
			s = strings.ReplaceAll(s, f, redacted)
		}
	}
	return s
}

// scrubBytes is scrub for a body: b itself when it holds no secret, so
// that a clean body is not copied.
func (sc *scrubber) scrubBytes(b []byte) []byte {
	for _, f := range sc.forms {
		if bytes.Contains(b, []byte(f)) {
			return []byte(sc.scrub(string(b)))
		}
	}
	return b
}

// headers scrubs the names (lower-case, so compared without case) and the
// values of response headers.
func (sc *scrubber) headers(h map[string]string) map[string]string {
	if len(sc.forms) == 0 {
		return h
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		for _, f := range sc.forms {
			k = strings.ReplaceAll(k, strings.ToLower(f), redacted)
		}
		out[k] = sc.scrub(v)
	}
	return out
}
