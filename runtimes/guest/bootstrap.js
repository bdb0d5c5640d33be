// pmjail's Deno bootstrap. It connects to the host over the channel, offers
// the broker as the global `host` (plain scripts) and as `ctx.host`
// (handler modules), imports the job's module and reports its outcome.
// Usage (inside the jail): deno run ... /pmjail/bootstrap.js /job/main.js
import { Channel, makeHost } from "./channel.js";
import { installFetch } from "./fetch.js";

const channel = new Channel();
const start = await channel.started;

if (start.options?.timing === "coarse") coarsenTime();

const module = moduleOf(start.source);
const input = start.input ?? null;
const host = makeHost(channel, input);
Object.defineProperty(globalThis, "host", { value: host, enumerable: false });
installFetch(channel, start.capabilities);

let reported = false;
async function fail(err) {
  if (reported) return;
  reported = true;
  const e = err instanceof Error ? err : new Error(String(err));
  try {
    await channel.finish({
      type: "error",
      error: { name: e.name ?? "Error", message: e.message ?? String(err), stack: module.named(e.stack ?? "") },
    });
  } finally {
    Deno.exit(1);
  }
}

// Errors thrown after the module finished loading (timers, promises) end the
// run through the same report instead of Deno's default printout.
globalThis.addEventListener("error", (ev) => {
  ev.preventDefault();
  fail(ev.error ?? ev.message);
});
globalThis.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  fail(ev.reason);
});

try {
  const mod = await import(module.url);
  if (typeof mod.default === "function") {
    const value = await mod.default(input, Object.freeze({ host, input }));
    // JSON.stringify throws for a value that cannot cross (a BigInt, a
    // cycle): that is the guest's error, reported as such.
    const sent = channel.finish({ type: "done", value: value === undefined ? null : value });
    reported = true;
    await sent;
    Deno.exit(0);
  }
  // A plain script: its console output and exit code are the result, and
  // work it scheduled keeps running until the event loop is empty.
} catch (err) {
  await fail(err);
}

// moduleOf is what to import: the job's file in its root, or, for a
// runtime started before its job (a warm runtime), the program the start
// frame carries, evaluated from memory: nothing of the job is ever written
// into a root that was handed over before the job was known.
// Its stack traces name it as a cold run's would: the job's file.
function moduleOf(source) {
  if (source == null) return { url: Deno.args[0], named: (stack) => stack };
  const type = source.typescript ? "application/typescript" : "application/javascript";
  const url = URL.createObjectURL(new Blob([source.text], { type }));
  const file = "file://" + Deno.args[0];
  return { url, named: (stack) => String(stack).replaceAll(url, file) };
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
