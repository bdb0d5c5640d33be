#!/usr/bin/env bash
# trace-syscalls.sh — re-derive the syscall allowlists in profiles/seccomp/
# by tracing what the runtimes really call.
#
# Usage: profiles/trace-syscalls.sh [OUTDIR]
#   DENO=/path/to/deno PYODIDE=/path/to/pyodide/dir profiles/trace-syscalls.sh
#
# For each workload it runs `strace -f -qq -e trace=all` and keeps the names
# of every system call any thread made (failed calls too: a call that fails
# on the host would fail differently under the filter). It writes
#   OUTDIR/deno.txt     union over the Deno workloads
#   OUTDIR/pyodide.txt  the Pyodide workload (plus the Deno union)
#   OUTDIR/native.txt   a shell and coreutils
# one sorted name per line, and
#   OUTDIR/*.args.txt   the first argument of every prctl, socket and
#                       socketpair call (the option, the address family),
#                       which the policies filter on
# Compare them with the "names" in
# profiles/seccomp/*.json; SECCOMP.md explains what is added by hand (the Go
# init stage's calls between installing the filter and execve) and what is
# deliberately left out.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
DENO=${DENO:-$root/node_modules/@deno/linux-x64-glibc/deno}
PYODIDE=${PYODIDE:-$root/node_modules/pyodide}
out=${1:-$(mktemp -d /tmp/pmjail-trace-out.XXXXXX)}
mkdir -p "$out"

command -v strace >/dev/null || { echo "strace is required" >&2; exit 1; }
[ -x "$DENO" ] || { echo "no Deno binary at $DENO" >&2; exit 1; }

# Workloads live outside any project folder: a deno.json or package.json in
# a parent folder would make Deno load it and call more than a job would.
work=$(mktemp -d /tmp/pmjail-trace.XXXXXX)
export DENO_DIR="$work/deno_dir"
# The first run in a fresh DENO_DIR checks for a newer Deno over the network
# (nscd, DNS): a jailed run never does that, so the trace must not either.
export DENO_NO_UPDATE_CHECK=1
trap 'rm -rf "$work"' EXIT

cat >"$work/hello.js" <<'JS'
console.log("hello");
JS
cat >"$work/json.js" <<'JS'
const o = JSON.parse(JSON.stringify({ a: [1, 2, 3], b: { c: "d" } }));
console.log(o.b.c);
JS
cat >"$work/regex.js" <<'JS'
const m = /(\d+)-(\d+)/u.exec("abc 12-34 def");
console.log(m[1], "x".repeat(1000).replace(/x/g, "y").length);
JS
cat >"$work/crypto.js" <<'JS'
const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode("abc"));
console.log(new Uint8Array(d)[0], crypto.getRandomValues(new Uint8Array(4)).length, crypto.randomUUID().length);
JS
cat >"$work/timers.js" <<'JS'
await new Promise((r) => setTimeout(r, 20));
let n = 0;
await new Promise((r) => { const id = setInterval(() => { if (++n === 3) { clearInterval(id); r(); } }, 5); });
console.log("timers", n, performance.now() > 0);
JS
cat >"$work/bigarray.js" <<'JS'
const a = new Float64Array(50_000_000); a.fill(1.5);
const b = Array.from({ length: 2_000_000 }, (_, i) => i * 2);
console.log(a.length, b.reduce((x, y) => x + y, 0));
JS
cat >"$work/async.js" <<'JS'
const vals = await Promise.all([1, 2, 3].map(async (x) => { await null; return x * 2; }));
queueMicrotask(() => console.log("micro"));
console.log(vals.join(","));
JS
cat >"$work/worker_child.js" <<'JS'
self.onmessage = (e) => { self.postMessage(e.data * 2); self.close(); };
JS
cat >"$work/worker.js" <<'JS'
const w = new Worker(new URL("./worker_child.js", import.meta.url).href, { type: "module" });
const v = await new Promise((r) => { w.onmessage = (e) => r(e.data); w.postMessage(21); });
w.terminate();
console.log("worker", v);
JS
cat >"$work/socket.js" <<'JS'
import net from "node:net";
const s = new net.Socket({ fd: 3, readable: true, writable: true });
s.write("ping\n");
s.once("data", (d) => { console.log("got", String(d).trim()); s.destroy(); });
JS
cat >"$work/typed.ts" <<'TS'
interface P { x: number; y: number }
const p: P = { x: 1, y: 2 };
const sum = (q: P): number => q.x + q.y;
console.log("ts", sum(p));
TS
cat >"$work/wasm.js" <<'JS'
// (module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))
const bytes = new Uint8Array([0,97,115,109,1,0,0,0,1,7,1,96,2,127,127,1,127,3,2,1,0,7,7,1,3,97,100,100,0,0,10,9,1,7,0,32,0,32,1,106,11]);
const m = await WebAssembly.compile(bytes);
const i = await WebAssembly.instantiate(m);
console.log("wasm", i.exports.add(2, 3));
JS
cat >"$work/pyodide.mjs" <<'JS'
const { loadPyodide } = await import(Deno.args[0] + "/pyodide.mjs");
const py = await loadPyodide({ indexURL: Deno.args[0] + "/" });
py.runPython("import json, re, random; print(1)");
JS

# socketpair.py runs its argv with fd 3 as one end of a socketpair and
# answers one line on the other end, as the pmjail channel would.
cat >"$work/socketpair.py" <<'PY'
import fcntl, os, socket, subprocess, sys
a, b = socket.socketpair()
# Keep our end clear of fd 3, which the child's end is about to take.
fd = fcntl.fcntl(a.fileno(), fcntl.F_DUPFD_CLOEXEC, 10)
a.close()
a = socket.socket(fileno=fd)
os.dup2(b.fileno(), 3, inheritable=True)
p = subprocess.Popen(sys.argv[1:], pass_fds=(3,))
os.close(3); b.close()
line = a.recv(100)
a.sendall(b"pong " + line)
sys.exit(p.wait())
PY

names() { # strace log -> syscall names
  sed -nE 's/^[0-9]+ +(<\.\.\. )?([a-z_0-9]+)[( ].*/\2/p' "$1" | grep -v '^exited$\|^killed$\|^resumed$' | sort -u
}

# The calls whose first argument the policies filter on: "prctl PR_SET_NAME",
# "socket AF_UNIX". strace names the constant; an unknown one stays a number.
firstargs() { # strace log -> "call FIRSTARG" lines
  sed -nE 's/^[0-9]+ +(prctl|socket|socketpair)\(([A-Za-z0-9_]+).*/\1 \2/p' "$1" | sort -u
}

run() { # name cmd...
  local name=$1; shift
  strace -f -qq -e trace=all -o "$work/$name.strace" "$@" >"$work/$name.out" 2>&1 ||
    { echo "workload $name failed:" >&2; cat "$work/$name.out" >&2; exit 1; }
  names "$work/$name.strace" >"$work/$name.names"
  firstargs "$work/$name.strace" >"$work/$name.args"
  printf '%-10s %3d calls  %s\n' "$name" "$(wc -l <"$work/$name.names")" "$(head -c 60 "$work/$name.out" | tr '\n' ' ')"
}

deno_run=("$DENO" run --no-prompt --no-config)
for w in hello json regex crypto timers bigarray async wasm; do
  run "$w" "${deno_run[@]}" "$work/$w.js"
done
run typescript "${deno_run[@]}" "$work/typed.ts"
run worker "${deno_run[@]}" --allow-read="$work" "$work/worker.js"
if command -v python3 >/dev/null; then
  # strace runs under the driver so only Deno's calls are counted.
  python3 "$work/socketpair.py" strace -f -qq -e trace=all -o "$work/socket.strace" \
    "${deno_run[@]}" "$work/socket.js" >"$work/socket.out" 2>&1 ||
    { echo "workload socket failed:" >&2; cat "$work/socket.out" >&2; exit 1; }
  names "$work/socket.strace" >"$work/socket.names"
  firstargs "$work/socket.strace" >"$work/socket.args"
  printf '%-10s %3d calls  %s\n' socket "$(wc -l <"$work/socket.names")" "$(head -c 60 "$work/socket.out")"
else
  echo "python3 missing: socket workload skipped" >&2
fi
cat "$work"/*.names | sort -u >"$out/deno.txt"
cat "$work"/*.args | sort -u >"$out/deno.args.txt"

if [ -d "$PYODIDE" ]; then
  run pyodide "${deno_run[@]}" --allow-read="$PYODIDE" "$work/pyodide.mjs" "$PYODIDE"
  sort -u "$out/deno.txt" "$work/pyodide.names" >"$out/pyodide.txt"
  sort -u "$out/deno.args.txt" "$work/pyodide.args" >"$out/pyodide.args.txt"
else
  echo "no Pyodide at $PYODIDE: pyodide.txt skipped" >&2
fi

rm -f "$work"/*.names "$work"/*.args
run sh sh -c 'ls -la / >/dev/null; cat /etc/hostname | tr a-z A-Z | sort | uniq | wc -c; echo hi >"$0/f"; cp "$0/f" "$0/g"; mv "$0/g" "$0/h"; rm "$0/f" "$0/h"; mkdir "$0/d"; rmdir "$0/d"; date; id; env | head -1; sleep 0.01; find "$0" -maxdepth 1 | head -1; grep -c . /etc/passwd; sed -n 1p /etc/passwd; awk "{print 1}" /etc/hostname; head -c 10 /dev/urandom | od -An | wc -l; stat / >/dev/null; readlink -f /proc/self/exe; uname -a' "$work"
run bash bash -c 'x=$(echo sub); for i in 1 2; do :; done; echo "$x" | cat; (exit 3) || true; trap "" INT; wait; ulimit -n; touch "$0/t"; test -f "$0/t" && rm "$0/t"; printf "%s\n" ok' "$work"
cat "$work"/*.names | sort -u >"$out/native.txt"
cat "$work"/*.args | sort -u >"$out/native.args.txt"

echo "wrote $out/deno.txt $out/pyodide.txt $out/native.txt"
