package integration

import (
	"strings"
	"testing"
)

// pyLogPaths calls pmjail.log every way a script can: an ASCII message
// (which the bootstrap passes without JSON), non-ASCII and lone-surrogate
// text, meta, a message that is not a string, meta that cannot cross or
// nests too deep, and a call while a request is in flight (which takes the
// promise path). It returns what each call returned.
const pyLogPaths = `
import asyncio, json, pmjail

def attempt(fn):
    try:
        return fn()
    except Exception as e:
        return type(e).__name__

async def main(input, ctx):
    out = []
    out.append(pmjail.log.info("ascii \"quoted\" \\ \n\t\x01"))
    out.append(pmjail.log.debug("caf\u00e9 \U0001F600 \udc80"))
    out.append(pmjail.log.warning("with meta", {"k": [1, "\u00e9"]}))
    out.append(pmjail.log.error(12345))
    out.append(attempt(lambda: pmjail.log.info("bad meta", {1, 2})))
    out.append(attempt(lambda: pmjail.log.info("nan meta", {"x": float("nan")})))
    out.append(pmjail.log.info("deep", {"a": json.loads("[" * 70 + "]" * 70)}))
    task = asyncio.ensure_future(ctx.host.request.send_async({"url": "http://192.0.2.1/"}))
    await asyncio.sleep(0)
    out.append(pmjail.log.info("while a request is in flight"))
    out.append((await task)["error"]["code"])
    out.append(pmjail.log.info("after"))
    return out
`

// TestPythonLogPaths: every way of logging from Python reaches the host
// as it did through the promise path, replies and errors included, with
// and without the log capability.
func TestPythonLogPaths(t *testing.T) {
	const ok = `{"ok":true,"value":null}`
	const deep = `{"ok":false,"error":{"code":"invalid_request","message":"params nests deeper than 64 levels: value nests too deeply"}}`
	const denied = `{"ok":false,"error":{"code":"denied","message":"the job did not declare the log capability"}}`
	for _, tc := range []struct {
		name  string
		flags []string
		reply string
		logs  []string
	}{
		{"cap", []string{"--cap", "log"}, ok, []string{
			"info|ascii \"quoted\" \\ \n\t\x01|",
			"debug|caf\u00e9 \U0001F600 \ufffd|",
			`warn|with meta|{"k":[1,"é"]}`,
			"error|12345|",
			"info|while a request is in flight|",
			"info|after|",
		}},
		{"nocap", nil, denied, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runScript(t, "logs.py", pyLogPaths, tc.flags...)
			if r.Status != "ok" {
				t.Fatalf("status %s error %+v stderr %s", r.Status, r.Error, r.Stderr)
			}
			r4 := tc.reply
			want := "[" + strings.Join([]string{r4, r4, r4, r4, `"TypeError"`, `"JsException"`, deep, r4, `"denied"`, r4}, ",") + "]"
			if got := compactJSON(r.Value); got != want {
				t.Errorf("replies\n got %s\nwant %s", got, want)
			}
			var logs []string
			for _, l := range r.Logs {
				meta := ""
				if len(l.Meta) > 0 {
					meta = compactJSON(l.Meta)
				}
				logs = append(logs, l.Level+"|"+l.Message+"|"+meta)
			}
			if g, w := strings.Join(logs, "\n--\n"), strings.Join(tc.logs, "\n--\n"); g != w {
				t.Errorf("logs\n got %q\nwant %q", g, w)
			}
		})
	}
}
