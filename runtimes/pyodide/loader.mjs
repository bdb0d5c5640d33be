// pmjail's Pyodide loader. It runs under the same locked-down Deno flags as
// a JavaScript guest, loads CPython-on-wasm from the read-only assets
// directory (from a memory snapshot when one is given, which cuts start-up
// from seconds to a fraction of one), and hands the job to bootstrap.py.
//
// Usage (inside the jail):
//   deno run ... /pmjail/loader.mjs run <assetsDir> <snapshot|-> /job/main.py <job.json|-> [<packages>]
// Usage (by the supervisor, once per Pyodide+Deno version, no guest code):
//   deno run ... <dir>/loader.mjs snapshot <assetsDir> <outFile>
//   deno run ... /pmjail/loader.mjs warm <assetsDir> <snapshot|->
// (warm runs at the in-jail paths: Deno's code cache is keyed by them)
import { Channel, htmlSafeExtra, makeHost } from "./channel.js";
import { installFetch } from "./fetch.js";

const [mode, assetsDir, snapshotArg, mainPath, jobArg, packagesDir] = Deno.args;
const here = new URL(".", import.meta.url).pathname;
const snapshotPath = mode !== "snapshot" && snapshotArg && snapshotArg !== "-" ? snapshotArg : null;

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
  // Named by its path in the jail, where it runs: the snapshot is made on
  // the host, and its code objects keep the name (a fatal error's stack
  // printed the host's state directory to the guest).
  ns.set("filename", "/pmjail/bootstrap.py");
  py.runPython(`
import sys, types
boot = types.ModuleType("_pmjail_boot")
boot.__file__ = filename
exec(compile(source, filename, "exec", dont_inherit=True), boot.__dict__)
sys.modules["_pmjail_boot"] = boot
`, { globals: ns });
  ns.destroy();
}

// fromSnapshot are loadPyodide's options for a start from the memory snapshot
// at path, read straight into the wasm memory. Pyodide's own way reads the
// 31 MB into a buffer and copies that into memory: a second copy and ~8,000
// more page faults, ~45 ms of CPU a run (measured). Pyodide gets the
// snapshot's header only, which it checks (magic, build id) and decodes as
// usual; the memory image is read in place of its copy.
function fromSnapshot(path) {
  const file = Deno.openSync(path);
  const size = file.statSync().size;
  const readFull = (buf) => {
    for (let off = 0; off < buf.length;) {
      const n = file.readSync(buf.subarray(off));
      if (n === null || n === 0) throw new Error(`pmjail loader: ${path} is shorter than it says`);
      off += n;
    }
  };
  const fixed = new Uint8Array(16);
  readFull(fixed);
  const imageOffset = new Uint32Array(fixed.buffer)[1];
  if (imageOffset < fixed.length || imageOffset > size) throw new Error(`pmjail loader: ${path} has a bad header`);
  const header = new Uint8Array(imageOffset);
  file.seekSync(0, Deno.SeekMode.Start);
  readFull(header);
  return {
    _loadSnapshot: header,
    createPyodideModule: async (settings) => {
      const { default: create } = await import(`${assetsDir}/pyodide.asm.mjs`);
      settings.INITIAL_MEMORY = size; // what Pyodide sets from a whole snapshot
      const module = await create(settings);
      const restore = module.API?.restoreSnapshot;
      if (typeof restore !== "function") throw new Error("pmjail loader: this Pyodide has no API.restoreSnapshot");
      module.API.restoreSnapshot = (bytes) => {
        const meta = restore(bytes); // the header: checks, no memory to copy
        file.seekSync(imageOffset, Deno.SeekMode.Start);
        readFull(new Uint8Array(module.HEAP8.buffer, 0, size - imageOffset));
        file.close();
        return meta;
      };
      return module;
    },
  };
}

// Emscripten's getuid asks Node's process.getuid(), which Deno grants
// only with --allow-sys=uid: without it os.getuid() aborted the whole
// interpreter with a JavaScript error no Python code could catch. It is
// 0, as Emscripten says off Node and as its getgid always says.
globalThis.process.getuid = () => 0;

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
  await load(snapshotPath ? fromSnapshot(snapshotPath) : {});
  Deno.exit(0);
} else if (mode !== "run") {
  console.error(`pmjail loader: unknown mode ${mode}`);
  Deno.exit(2);
}

// Pyodide loads before the start frame is read: nothing of it depends on
// the job, so a runtime started ahead of its job (a daemon's warm
// runtime) has it loaded while it waits. "-" means no snapshot: a cold
// start.
const py = await load(snapshotPath ? fromSnapshot(snapshotPath) : {});
if (!snapshotPath) await installBootstrap(py);

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
// stdin is the job's (a file the init stage opened, or /dev/null): read
// as it is asked for, bytes as they are.
py.setStdin({ read: (buf) => Deno.stdin.readSync(buf) ?? 0, isatty: false });

// The operator's vetted wheels (pmjail packages), bound read-only at
// packagesDir: copied into Pyodide's file system read-only, first on
// sys.path. Nothing is fetched; micropip stays refused below.
if (packagesDir) installPackages(py, packagesDir);

// The host's time zone database, bound read-only where it has one, at
// Python's default TZPATH: zoneinfo reads a zone's file as it is asked
// for (Pyodide's assets have no tzdata package). Pyodide's node file
// system takes an error without an errno (Deno's refusal of a write or
// of a path it may not read) as fatal to the whole interpreter: it is
// EACCES instead, a PermissionError Python code can catch.
mountZoneinfo(py, "/usr/share/zoneinfo");

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

// The run's job-independent set-up (bootstrap.py's prepare) happens before
// the channel says the runtime is ready: a daemon's warm runtime has it
// done before its job arrives.
const boot = py.pyimport("_pmjail_boot");
boot.prepare();
const run = boot.run;

const channel = new Channel();
const start = await channel.started;
const coarse = start.options?.timing === "coarse";
const input = start.input ?? null;
const host = makeHost(channel, input);
// pyodide.http.pyfetch calls the global fetch (bootstrap.py binds it).
installFetch(channel, start.capabilities);

// The broker as Python sees it: JSON text in both directions, so no proxy
// of a Python object outlives a call and nothing depends on to_js rules.
// A log call's params are normalised as host.log does it for JavaScript.
const logParams = (params) => ({ message: String(params.message), ...(params.meta === undefined ? {} : { meta: params.meta }) });
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

  // logSync answers a log call without a promise: the host answers one at
  // once, so Python blocks for one round trip of the pipe instead of
  // suspending its stack and waking through an asynchronous read. Python passes an ASCII message
  // as is (no JSON to encode and parse) and anything else as the params'
  // JSON. It returns undefined — take the asynchronous path — whenever the
  // channel has another call in flight. Other methods always take that
  // path: a request may take seconds, and the event loop keeps running
  // while it does.
  logSync(level, message, paramsJson) {
    if (!Object.hasOwn(host.log, level)) return undefined;
    const params = paramsJson === undefined ? { message: String(message) } : logParams(JSON.parse(paramsJson));
    const r = channel.callSync(`log.${level}`, params);
    return r === null ? undefined : JSON.stringify(r);
  },
};

if (coarse) coarsenTime();

// A warm runtime's program comes in the start frame; its tracebacks
// name the job's file all the same.
const source = start.source ? start.source.text : await Deno.readTextFile(mainPath);
// The job's other files (several-file jobs), which the manifest lists,
// go into Python's own file system beside the entry, where its import
// system finds them; the manifest's env becomes os.environ's.
const manifest = jobArg && jobArg !== "-" ? JSON.parse(Deno.readTextFileSync(jobArg)) : { files: [], env: {} };
const files = {};
for (const p of manifest.files) files[p] = Deno.readTextFileSync(p);
// The run is not awaited at the module's top level: when Python waits on
// something nothing can settle any more (a Future no one resolves), the
// event loop runs empty and beforeunload says so, where a top-level await
// would end in Deno's own report, which names this file.
let settled = false;
globalThis.addEventListener("beforeunload", (ev) => {
  if (settled) return;
  settled = true;
  ev.preventDefault();
  let at = null;
  try {
    at = boot.where(mainPath.slice(0, mainPath.lastIndexOf("/")));
  } catch { /* the message does without the place */ }
  const waiting = at ? `the await at ${at} was waiting` : "it was waiting";
  const message = `the Python program never finished: ${waiting} for something that nothing (no timer, I/O or broker call) was left to settle`;
  report({ kind: "error", error: { name: "UnsettledPromise", message, stack: "" } });
});
run.callPromising(bridge, JSON.stringify(input), source, mainPath, JSON.stringify(files), JSON.stringify(manifest.env ?? {})).then(valueFits, (err) => {
  // os._exit(n) (Emscripten's exit) ends Python at once, as an Exit error
  // carrying its status: the exit code is the result, as sys.exit's.
  if (err?.name === "Exit" && Number.isInteger(err.status)) return { kind: "exit", code: err.status & 0xff };
  // Only a failure of pmjail's own bootstrap lands here; the guest's own
  // exceptions come back as an outcome.
  return { kind: "error", error: { name: err?.name ?? "Error", message: String(err?.message ?? err), stack: String(err?.stack ?? "") } };
}).then((outcome) => {
  if (settled) return;
  settled = true;
  return report(outcome);
});

// report ends the run with the bootstrap's outcome.
async function report(outcome) {
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
}

// valueFits parses the bootstrap's outcome, making a value too large for
// the host's frame cap a ResultError with the sizes rather than a frame
// the host refuses. The value is measured as the frame will hold it,
// JSON.stringify's text: Python's own (ASCII, é as \u00e9, an emoji as
// twelve bytes, 1e+20 where JavaScript writes 21 digits) is up to three
// times longer or shorter, which refused values a Deno guest returns and
// let others through to end the run as a protocol error.
function valueFits(text) {
  const prefix = '{"kind": "done", "value": ';
  const limit = (start.options?.max_frame || 4 << 20) - 24;
  const pyLength = text.startsWith(prefix) ? text.length - prefix.length - 1 : 0;
  // Python's text is at most three times the frame's (twelve characters
  // for an emoji's four bytes): one longer than that is over the limit
  // unparsed.
  if (pyLength > 3 * limit) {
    const message = `the returned value is at least ${Math.ceil(pyLength / 3)} bytes as JSON, over the ${limit}-byte limit on a result's value`;
    return { kind: "error", error: { name: "ResultError", message, stack: "" } };
  }
  const outcome = JSON.parse(text);
  // The host counts the value HTML-safe, as the result holds it (< as
  // \u003c): at most six bytes for each character of Python's text (a
  // number at most 4.2: 1e+20), so a text within a sixth of the limit
  // fits.
  if (pyLength > limit / 6) {
    const json = JSON.stringify(outcome.value);
    const size = json.length > limit / 6 ? new TextEncoder().encode(json).length + htmlSafeExtra(json) : json.length;
    if (size > limit) {
      const message = `the returned value is ${size} bytes as JSON, over the ${limit}-byte limit on a result's value`;
      return { kind: "error", error: { name: "ResultError", message, stack: "" } };
    }
  }
  return outcome;
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

// coarsenTime is the opt-in timing mitigation, as far as it reaches (see
// bootstrap.js): the main thread's clock at 1 ms resolution and no
// SharedArrayBuffer constructor. Atomics stays: node: modules need it.
function coarsenTime() {
  const now = performance.now.bind(performance);
  Object.defineProperty(performance, "now", { value: () => Math.floor(now()), configurable: false });
  delete globalThis.SharedArrayBuffer;
}

// mountZoneinfo mounts dir, read through Deno's permissions, at the same
// path in Pyodide's file system, when the root holds it.
function mountZoneinfo(py, dir) {
  try {
    if (!Deno.statSync(dir).isDirectory) return;
  } catch {
    return;
  }
  const { FS } = py;
  const nodefs = FS.filesystems.NODEFS;
  const attempt = nodefs.tryFSOperation;
  nodefs.tryFSOperation = (f) => {
    try {
      return attempt(f);
    } catch (e) {
      if (e instanceof Deno.errors.NotCapable) throw new FS.ErrnoError(2 /* EACCES */);
      throw e;
    }
  };
  FS.mkdirTree(dir);
  FS.mount(nodefs, { root: dir }, dir);
}

// installPackages copies the tree at dir into Pyodide's file system at the
// same path, files and directories read-only, and puts it on sys.path. The
// files are those dir.json names: the seccomp policy lets no runtime list
// a directory.
function installPackages(py, dir) {
  const dirs = new Set([dir]);
  for (const rel of JSON.parse(Deno.readTextFileSync(`${dir}.json`))) {
    const path = `${dir}/${rel}`;
    const parent = path.slice(0, path.lastIndexOf("/"));
    py.FS.mkdirTree(parent);
    for (let d = parent; d.length > dir.length; d = d.slice(0, d.lastIndexOf("/"))) dirs.add(d);
    py.FS.writeFile(path, Deno.readFileSync(path));
    py.FS.chmod(path, 0o444);
  }
  py.FS.mkdirTree(dir);
  for (const d of [...dirs].sort().reverse()) py.FS.chmod(d, 0o555);
  const ns = py.globals.get("dict")();
  ns.set("d", dir);
  // Only d's finder could hold a stale listing: not
  // importlib.invalidate_caches(), which imports importlib.metadata
  // (~100 ms of CPU here; see bootstrap.py's _forget_listings).
  py.runPython("import sys\nsys.path.insert(0, d)\nsys.path_importer_cache.pop(d, None)", { globals: ns });
  ns.destroy();
}
