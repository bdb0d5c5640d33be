// pmjail's Pyodide loader. It runs under the same locked-down Deno flags as
// a JavaScript guest, loads CPython-on-wasm from the read-only assets
// directory (from a memory snapshot when one is given, which cuts start-up
// from seconds to a fraction of one), and hands the job to bootstrap.py.
//
// Usage (inside the jail):
//   deno run ... /pmjail/loader.mjs run <assetsDir> <snapshot|-> /job/main.py
// Usage (by the supervisor, once per Pyodide+Deno version, no guest code):
//   deno run ... <dir>/loader.mjs snapshot <assetsDir> <outFile>
//   deno run ... /pmjail/loader.mjs warm <assetsDir> <snapshot|->
// (warm runs at the in-jail paths: Deno's code cache is keyed by them)
import { Channel, makeHost } from "./channel.js";

const [mode, assetsDir, snapshotArg, mainPath] = Deno.args;
const here = new URL(".", import.meta.url).pathname;
const snapshotPath = mode !== "snapshot" && snapshotArg && snapshotArg !== "-" ? snapshotArg : null;
// The snapshot's 31 MB are read on Deno's I/O threads while the main thread
// imports Pyodide and waits for the job; loadPyodide awaits the promise.
const snapshotBytes = snapshotPath ? Deno.readFile(snapshotPath) : null;

// Python's environment: nothing of the loader's own (which is not readable
// anyway without --allow-env), only what a script may reasonably expect.
const pyEnv = { HOME: "/tmp", LANG: "C.UTF-8", PATH: "/nonexistent", TMPDIR: "/tmp" };

// Modules imported while the snapshot is made, so a run from the snapshot
// finds them in memory instead of unzipping and compiling them again.
const PRELOAD = [
  "ast", "asyncio", "base64", "collections", "dataclasses", "datetime", "decimal",
  "enum", "functools", "hashlib", "itertools", "json", "linecache", "math", "re",
  "random", "string", "textwrap", "time", "traceback", "types", "typing",
  "urllib.parse", "uuid",
];

// The bootstrap becomes the module _pmjail_boot. The snapshot is made with
// it imported, so a run from the snapshot finds it compiled and ready; a
// cold start installs it the same way.
async function installBootstrap(py) {
  const source = await Deno.readTextFile(`${here}bootstrap.py`);
  const ns = py.globals.get("dict")();
  ns.set("source", source);
  ns.set("filename", `${here}bootstrap.py`);
  py.runPython(`
import sys, types
boot = types.ModuleType("_pmjail_boot")
boot.__file__ = filename
exec(compile(source, filename, "exec", dont_inherit=True), boot.__dict__)
sys.modules["_pmjail_boot"] = boot
`, { globals: ns });
  ns.destroy();
}

async function load(extra) {
  const { loadPyodide } = await import(`${assetsDir}/pyodide.mjs`);
  return await loadPyodide({
    indexURL: `${assetsDir}/`,
    env: pyEnv,
    packages: [],
    checkAPIVersion: true,
    // Start-up noise must not reach the job's stdout.
    stdout: () => {},
    stderr: () => {},
    ...extra,
  });
}

if (mode === "snapshot") {
  const py = await load({ _makeSnapshot: true });
  py.runPython(`import ${PRELOAD.join(", ")}`);
  await installBootstrap(py);
  const bytes = py.makeMemorySnapshot();
  await Deno.writeFile(snapshotArg, bytes);
  Deno.exit(0);
} else if (mode === "warm") {
  // Loads Pyodide as a run does, so that Deno's code cache (DENO_DIR)
  // holds the compiled modules; no guest code, no channel.
  await load(snapshotBytes ? { _loadSnapshot: snapshotBytes } : {});
  Deno.exit(0);
} else if (mode !== "run") {
  console.error(`pmjail loader: unknown mode ${mode}`);
  Deno.exit(2);
}

const channel = new Channel();
const start = await channel.started;
const coarse = start.options?.timing === "coarse";
const input = start.input ?? null;
const host = makeHost(channel, input);

// "-" means no snapshot: a cold start.
const py = await load(snapshotBytes ? { _loadSnapshot: snapshotBytes } : {});
if (!snapshotBytes) await installBootstrap(py);

// Python's output goes to the process's own stdout and stderr, raw and
// unbuffered on the JS side: Python's io layer does the buffering.
const rawWriter = (file) => ({
  write(buf) {
    let off = 0;
    while (off < buf.length) off += file.writeSync(buf.subarray(off));
    return buf.length;
  },
  isatty: false,
});
py.setStdout(rawWriter(Deno.stdout));
py.setStderr(rawWriter(Deno.stderr));

// Package installation needs a network and a writable site-packages, and
// pmjail gives neither: refuse it at once with a clear reason instead of
// failing somewhere inside a fetch.
const refuse = () => {
  const e = new Error("package installation is disabled in pmjail (unsupported)");
  e.name = "PackageInstallDisabled";
  return Promise.reject(e);
};
for (const name of ["loadPackage", "loadPackagesFromImports", "mountNodeFS", "mountNativeFS"]) {
  try {
    Object.defineProperty(py, name, { value: name.startsWith("load") ? refuse : () => { throw new Error(`${name} is disabled in pmjail`); } });
  } catch { /* a frozen API object keeps its own; the jail still bounds it */ }
}

// The broker as Python sees it: JSON text in both directions, so no proxy
// of a Python object outlives a call and nothing depends on to_js rules.
const bridge = {
  call(method, paramsJson) {
    const params = paramsJson === undefined ? null : JSON.parse(paramsJson);
    let p;
    if (method.startsWith("log.")) {
      const level = method.slice(4);
      const fn = host.log[level];
      p = fn ? fn(params.message, params.meta) : channel.call(method, params);
    } else if (method === "request.send") {
      p = host.request.send(params);
    } else {
      p = channel.call(method, params);
    }
    return p.then((r) => JSON.stringify(r));
  },
};

if (coarse) coarsenTime();

const source = await Deno.readTextFile(mainPath);
const run = py.pyimport("_pmjail_boot").run;
let outcome;
try {
  outcome = JSON.parse(await run.callPromising(bridge, JSON.stringify(input), source, mainPath));
} catch (err) {
  // Only a failure of pmjail's own bootstrap lands here; the guest's own
  // exceptions come back as an outcome.
  outcome = { kind: "error", error: { name: err?.name ?? "Error", message: String(err?.message ?? err), stack: String(err?.stack ?? "") } };
}

switch (outcome.kind) {
  case "done":
    await finish("value" in outcome ? { type: "done", value: outcome.value } : { type: "done" });
    Deno.exit(0);
    break;
  case "exit":
    // sys.exit(n): the exit code is the result, as for a Deno script.
    await finish(null);
    Deno.exit(outcome.code);
    break;
  default:
    await finish({ type: "error", error: outcome.error });
    Deno.exit(1);
}

// finish sends the last frame and resolves once it is written; the caller
// exits then.
async function finish(frame) {
  try {
    if (frame) await channel.finish(frame);
  } catch {
    // The host is gone; the exit code still tells.
  }
}

// coarsenTime is the opt-in timing mitigation (as in bootstrap.js): clocks
// at 1 ms resolution and no SharedArrayBuffer for building a finer one.
function coarsenTime() {
  const now = performance.now.bind(performance);
  Object.defineProperty(performance, "now", { value: () => Math.floor(now()), configurable: false });
  delete globalThis.SharedArrayBuffer;
  delete globalThis.Atomics;
}
