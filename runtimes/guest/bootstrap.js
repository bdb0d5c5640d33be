// pmjail's Deno bootstrap. It connects to the host over the channel, offers
// the broker as the global `host` (plain scripts) and as `ctx.host`
// (handler modules), imports the job's module and reports its outcome.
// Usage (inside the jail): deno run ... /pmjail/bootstrap.js /job/main.js
import { brokerWorkers, Channel, htmlSafeExtra, makeHost } from "./channel.js";

// Up to the channel nothing depends on the job: a runtime started before
// its job (a warm runtime) has done it all before it says it is ready.
// The job's file is this module's argument; the program then sees itself
// started as `deno run /job/main.js` would start it (asScript).
const jobPath = Deno.args[0];
const mainURL = new URL(jobPath, "file:///").href;
asScript();
// The guest's scratch directory (TMPDIR), on its run's own /tmp: the one
// place it may write files.
Deno.mkdirSync(Deno.env.get("TMPDIR"), { mode: 0o700 });

// processRejections is Deno's own step that dispatches the
// unhandledrejection events due (taken before any guest code can replace
// it).
const processRejections = Deno[Deno.internal]?.core?.processTicksAndRejections;
const functionText = Function.prototype.toString;

let reported = false;
// plain is set once a plain script's module has run: its runtime's exit,
// as it unloads, is its end (see exiting).
let plain = false;
// awaiting is set while a handler's promise is unsettled.
let awaiting = false;

// report sends the run's last frame, then exits with code, or, without
// one, with the program's own exit code (Deno.exitCode, process.exitCode,
// as its unload listeners leave it), as `deno run` would. A frame sent is
// the outcome: nothing after it counts but the exit code.
async function report(frame, code) {
  if (reported) return;
  reported = true;
  try {
    await channel.finish(frame);
  } finally {
    Deno.exit(code);
  }
}

async function fail(err) {
  let error;
  try {
    error = (await reportJS()).describe(err);
  } catch {
    // A Proxy, or a getter that throws: nothing more can be said of it.
    error = { name: "Error", message: "the guest threw a value that could not be read", stack: "" };
  }
  renamed(error);
  return report({ type: "error", error }, 1);
}

// Errors thrown after the module finished loading (timers, promises) end the
// run through the same report instead of Deno's default printout, unless
// the guest handles them as `deno run` lets it: a listener of its own that
// cancels the event (preventDefault, returnValue = false), or node's
// process with an uncaughtException or unhandledRejection listener.
globalThis.addEventListener("error", (ev) => uncaught(ev, ev.error ?? ev.message));
globalThis.addEventListener("unhandledrejection", (ev) => uncaught(ev, ev.reason));
// Deno's own cancel, taken before any guest code can replace it.
const cancelEvent = Event.prototype.preventDefault;

// uncaught is the bootstrap's listener, the first on the global: it
// cancels the event itself, or Deno ends the runtime with its own
// printout as the dispatch returns, before any report. The guest's
// listeners run after it in the same dispatch; its cancel is recorded on
// the event instead, and once the dispatch is over (a microtask later)
// the run fails unless the guest handled it. A rejection no listener
// handled goes to node's process as Deno would hand it on (it does only
// for an event not cancelled): its callback cancels it when the process
// has a listener that takes it.
function uncaught(ev, err) {
  let handled = false;
  const handle = () => {
    handled = true;
  };
  try {
    Object.defineProperty(ev, "preventDefault", { value: handle, configurable: true });
    Object.defineProperty(ev, "returnValue", {
      get: () => !handled,
      set: (v) => {
        if (!v) handled = true;
      },
      configurable: true,
    });
  } catch { /* an event that takes no property: none cancels it */ }
  Reflect.apply(cancelEvent, ev, []);
  queueMicrotask(() => {
    if (!handled && ev.type === "unhandledrejection") {
      try {
        const node = denoInternal?.nodeProcessUnhandledRejectionCallback;
        if (typeof node === "function") node(ev);
      } catch (e) {
        err = e;
      }
    }
    if (!handled) fail(err);
  });
}

// The event loop ran empty while the handler's promise was pending: nothing
// can settle it any more. (A plain script's top-level await that cannot
// settle is Deno's own report on stderr, which names the guest's line and
// which the host reads: runtimes.UnsettledAwait.)
globalThis.addEventListener("beforeunload", (ev) => {
  if (!awaiting || reported) return;
  ev.preventDefault();
  const message = `the handler's promise never settled: ${mainURL}'s default export was still awaiting when nothing (no timer, I/O or broker call) was left to settle it`;
  report({ type: "error", error: { name: "UnsettledPromise", message, stack: "" } }, 1);
});

// The exit code as Deno will exit with it, read through Deno's own getter
// (taken before any guest code can replace it).
const exitCodeOf = Object.getOwnPropertyDescriptor(Deno, "exitCode")?.get?.bind(Deno);
// guestUnload is set when the guest may have an unload listener of its
// own: it would run after the bootstrap's, and what it prints or the exit
// code it sets must count, so the runtime then exits as it would without
// the exit frame. Every addEventListener on the global object (a bare
// call's included) for "unload", or for a type that is not a plain
// string, counts, and so does an onunload handler.
let guestUnload = false;
globalThis.addEventListener("unload", exiting);
const addListener = EventTarget.prototype.addEventListener;
Object.defineProperty(EventTarget.prototype, "addEventListener", {
  ...Object.getOwnPropertyDescriptor(EventTarget.prototype, "addEventListener"),
  value: {
    addEventListener(type, listener, options) {
      // A bare call (`addEventListener(...)`) has no this: the global's.
      if ((this == null || this === globalThis) && (typeof type !== "string" || type === "unload")) guestUnload = true;
      return Reflect.apply(addListener, this, arguments);
    },
  }.addEventListener,
});

// Node's process (the global `process`, node:process) emits its "exit"
// event from an unload listener of its own, which Deno adds with its own
// addEventListener, unseen above, once the guest first uses that process:
// after the bootstrap's. Whether it exists is Deno's internal mark of that
// first use, and its getter (both taken before any guest code can replace
// them) gives the process, whose listeners then say whether anything is
// left to run. (A Deno that names the mark otherwise fails
// TestDaemonWarmExit.)
const denoInternal = Deno[Deno.internal];
const processOf = Object.getOwnPropertyDescriptor(globalThis, "process")?.get;

// nodeExit reports whether node's process may have an exit listener.
function nodeExit() {
  if (denoInternal == null || typeof denoInternal !== "object") return true;
  if (denoInternal.__nodeProcessBootstrapped !== true) return false;
  const process = processOf?.call(globalThis);
  return typeof process?.listenerCount !== "function" || process.listenerCount("exit") > 0;
}

// exiting sends the exit frame as a plain script's runtime unloads (the
// event loop ran empty, or the guest called Deno.exit): the host then
// ends the jail at once instead of waiting for Deno's own teardown.
function exiting() {
  if (!plain || reported || guestUnload || typeof exitCodeOf !== "function") return;
  try {
    if (globalThis.onunload != null || nodeExit()) return;
    const code = exitCodeOf();
    if (Number.isInteger(code) && code >= 0 && code <= 255) channel.exiting(code);
  } catch { /* the runtime exits as it would without the frame */ }
}

await primed();
const channel = new Channel();
const start = await channel.started;

if (start.options?.timing === "coarse") coarsenTime();

const module = moduleOf(start.source);
const input = start.input ?? null;
const host = makeHost(channel, input);
Object.defineProperty(globalThis, "host", { value: host, enumerable: false });
lazyFetch(start.capabilities);
brokerWorkers((method, params) => channel.call(method, params), start.capabilities, new URL("./worker.js", import.meta.url).href);

// The largest frame the host reads (older hosts do not say).
const maxFrame = start.options?.max_frame || 4 << 20;

run();

async function run() {
  let value;
  try {
    const mod = await import(module.url);
    // A plain script: its console output and exit code are the result, and
    // work it scheduled keeps running until the event loop is empty. A
    // default export that is a class is no handler (it cannot be called):
    // its module is a script, as `deno run` runs it.
    if (typeof mod.default !== "function" || isClass(mod.default)) {
      plain = true;
      return;
    }
    awaiting = true;
    value = await mod.default(input, Object.freeze({ host, input }));
    awaiting = false;
  } catch (err) {
    awaiting = false;
    return fail(err);
  }
  await rejectionsSeen();
  if (reported) return;
  const { checkValue } = value === undefined ? {} : await reportJS();
  if (reported) return;
  // A handler's module run by `deno run` would exit with the exit code
  // the module or the handler set: so does the run (docs/guest-api.md).
  return report(doneFrame(value, checkValue));
}

// isClass reports whether fn is a class: its source text, read through
// the Function.prototype.toString taken before any guest code, is a class's.
function isClass(fn) {
  try {
    return /^class\b/.test(Reflect.apply(functionText, fn, []));
  } catch {
    return false;
  }
}

// rejectionsSeen lets the unhandledrejection events due fire before a
// handler's value counts: Deno dispatches them at a turn of its event loop
// that may never come once the handler returned (an op that completes at
// once is not one). Deno's own step does it at once; without it, a
// timer's turn does, slower (the first timer loads Deno's node:timers).
async function rejectionsSeen() {
  if (typeof processRejections === "function") {
    try {
      processRejections();
      return;
    } catch { /* take the slow way */ }
  }
  await new Promise((resolve) => setTimeout(resolve, 0));
}

// doneFrame is the frame for a handler's value, or a ResultError saying
// why the value cannot be the result as it is (checkValue, report.js's).
function doneFrame(value, checkValue) {
  if (value === undefined) return { type: "done" };
  let why;
  try {
    why = checkValue(value);
  } catch (err) {
    why = `reading it threw: ${err?.message ?? err}`;
  }
  let text;
  if (!why) {
    try {
      text = JSON.stringify(value);
    } catch (err) {
      why = `JSON.stringify threw: ${err?.message ?? err}`;
    }
  }
  if (!why) {
    // The frame is {"type":"done","value":<text>}, in UTF-8; the host
    // counts the value HTML-safe, as the result holds it (< as \u003c).
    const limit = maxFrame - 24;
    const size = text.length > limit / 6 ? new TextEncoder().encode(text).length + htmlSafeExtra(text) : text.length;
    if (size <= limit) return { type: "done", value };
    why = `is ${size} bytes as JSON, over the ${limit}-byte limit on a result's value`;
    return resultError(`the returned value ${why}`);
  }
  return resultError(`the returned value cannot be sent as JSON: ${why}`);
}

function resultError(message) {
  return { type: "error", error: { name: "ResultError", message, stack: "" } };
}

// renamed gives a warm run's error, its causes included, the names a
// cold run's would have: the job's file, not the module's blob: URL.
// Only a cause of its own counts: describe gives each one, and a getter
// the guest put on Object.prototype would hand out causes for ever.
function renamed(error) {
  for (let e = error; e; e = Object.hasOwn(e, "cause") ? e.cause : null) {
    if (typeof e.message === "string") e.message = module.named(e.message);
    if (typeof e.stack === "string") e.stack = module.named(e.stack);
  }
}

// reportJS loads report.js, which only an error or a handler's value
// needs: a plain script that ends well never loads it. Every module
// loaded before the job's first line costs a run's start ~0.5-1 ms
// (measured), more than this file's own code. A pending import keeps
// the event loop alive, so an error's report is not cut short by it.
let reportModule;
function reportJS() {
  reportModule ??= import("./report.js");
  return reportModule;
}

// lazyFetch makes the global fetch the broker's at once (fetch.js), but
// loads fetch.js at the first call: most jobs never fetch. Deno's own
// fetch is taken now, before any guest code: fetch.js reads data: and
// blob: URLs with it.
function lazyFetch(capabilities) {
  const platform = globalThis.fetch;
  let broker;
  globalThis.fetch = async function fetch(input, init = undefined) {
    try {
      broker ??= (await import("./fetch.js")).brokerFetch(channel, capabilities, platform);
      return await broker(input, init);
    } catch (err) {
      // The stack starts at the guest's call, as fetch.js makes it.
      if (err instanceof TypeError) Error.captureStackTrace(err, fetch);
      throw err;
    }
  };
}

// moduleOf is what to import: the job's file in its root, or, for a
// runtime started before its job (a warm runtime), the program the start
// frame carries, evaluated from memory: nothing of the job is ever written
// into a root that was handed over before the job was known.
// The stacks of the errors it reports name it as a cold run's would: the
// job's file (a stack the program prints itself names the blob: URL).
function moduleOf(source) {
  if (source == null) return { url: jobPath, named: (stack) => stack };
  // The media type says the program's dialect, as a file's extension
  // does in a cold run: Deno maps text/jsx and text/tsx to JSX and TSX.
  const type = source.media_type || "application/javascript";
  const url = URL.createObjectURL(new Blob([source.text], { type }));
  const file = "file://" + jobPath;
  return { url, named: (stack) => String(stack).replaceAll(url, file) };
}

// asScript gives the program the view of its start that `deno run
// /job/main.js` gives: no arguments (Deno.args, and process.argv after the
// script's path), and the job's file as the main module (Deno.mainModule,
// process.argv[1]), not the bootstrap and its argument. A CLI-style
// program that parses its arguments would otherwise take the job's path
// for one. Node's process reads both when the guest first uses it, which
// is after this. (import.meta.main stays false: the job's module is not
// Deno's main module, see docs/guest-api.md.)
function asScript() {
  try {
    Object.defineProperty(Deno, "args", { value: [], enumerable: true, configurable: true, writable: false });
    Object.defineProperty(Deno, "mainModule", { value: mainURL, enumerable: true, configurable: true, writable: false });
  } catch { /* a Deno whose namespace is sealed: the arguments stay */ }
  const boot = Deno[Deno.internal]?.__nodeBootstrapArgs;
  if (boot != null && Array.isArray(boot.denoArgs)) boot.denoArgs = [];
}

// primed readies, in a runtime started before its job (a warm runtime:
// its job's file is not in its root), what a job's first steps use for the
// first time and that Deno only sets up then, compiling its own code on
// first use: blob: URLs, the loading and analysis of a module from memory;
// the console's formatting (through a console of its own that prints
// nowhere); event dispatch (on a target of its own: the runtime's load and
// unload events go the same way). All of it is constant, no job's, and
// done and forgotten before the runtime says it is ready, so a warm run's
// job pays for none of it (and a cold run does not wait for it). What
// would cost every runtime CPU its job is unlikely to save is left out:
// a timer (Deno's first loads its Node timers, ~8 ms) and a TypeScript
// module (the transpiler's first use, ~1 ms, saved a TypeScript job
// ~0.1 ms).
async function primed() {
  try {
    Deno.statSync(jobPath);
    return;
  } catch { /* a warm runtime's root has no job file */ }
  const url = URL.createObjectURL(new Blob(["export default 0;"], { type: "application/javascript" }));
  try {
    await import(url);
  } catch { /* only a warm-up */ }
  URL.revokeObjectURL(url);
  try {
    const Console = Deno[Deno.internal]?.Console;
    if (typeof Console === "function") new Console(() => {}).log("primed", 0, {});
  } catch { /* only a warm-up */ }
  try {
    const target = new EventTarget();
    const listener = () => {};
    target.addEventListener("primed", listener);
    target.dispatchEvent(new Event("primed", { cancelable: true }));
    target.removeEventListener("primed", listener);
  } catch { /* only a warm-up */ }
}

// coarsenTime is the opt-in timing mitigation: the main thread's clocks at
// 1 ms resolution and no SharedArrayBuffer constructor for building a finer
// one. It reaches no further, and the posture says it is degraded: a Worker
// has the precise clock, shared WebAssembly memory is a SharedArrayBuffer,
// and process.hrtime() and performance marks read the runtime's own clock.
// Atomics stays: Deno's node: modules (node:timers behind setTimeout among
// them) need it, and without shared memory it times nothing.
function coarsenTime() {
  const now = performance.now.bind(performance);
  const dateNow = Date.now;
  Object.defineProperty(performance, "now", { value: () => Math.floor(now()), configurable: false });
  Object.defineProperty(Date, "now", { value: () => dateNow(), configurable: false });
  delete globalThis.SharedArrayBuffer;
}
