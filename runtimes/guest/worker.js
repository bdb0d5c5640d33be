// fetch inside a guest's Workers. A Worker has Deno's own fetch, which
// the jail's runtime (no network permission) refuses; the bootstrap starts
// every Worker the job makes through a small module that runs this first,
// then the job's own worker module. The Worker's fetch then sends its
// request.send calls, over a MessagePort, to the thread that made it, and
// on to the main thread, whose channel is the only way out: the host
// makes every check, as for a call from the main thread. Nothing here is
// a check.

import { brokerWorkers, PORT } from "./channel.js";
import { brokerFetch } from "./fetch.js";

// adopt makes this Worker's fetch, and the Worker constructor of its own
// nested Workers, the broker's. It runs before the job's worker module,
// whose listeners, added after, never see the port's message.
export function adopt() {
  const platform = globalThis.fetch;
  let port;
  let next = 1;
  const pending = new Map();
  const queued = [];
  let adopted;
  const ready = new Promise((resolve) => (adopted = resolve));
  globalThis.addEventListener("message", function first(ev) {
    globalThis.removeEventListener("message", first);
    if (ev.data?.[PORT] !== true || ev.ports.length !== 1) return;
    ev.stopImmediatePropagation();
    port = ev.ports[0];
    port.onmessage = (m) => {
      if (m.data?.id === undefined) return adopted(m.data?.capabilities ?? null);
      const reply = pending.get(m.data.id);
      if (reply === undefined) return;
      pending.delete(m.data.id);
      reply(m.data.reply);
    };
    for (const send of queued.splice(0)) send();
  });

  // call is a channel's call, through the port.
  function call(method, params) {
    return new Promise((resolve) => {
      const send = () => {
        const id = next++;
        pending.set(id, resolve);
        try {
          port.postMessage({ id, method, params });
        } catch (err) {
          pending.delete(id);
          resolve({ ok: false, error: { code: "internal", message: String(err) } });
        }
      };
      if (port === undefined) queued.push(send);
      else send();
    });
  }

  let broker;
  globalThis.fetch = async function fetch(input, init = undefined) {
    try {
      broker ??= brokerFetch({ call }, await ready, platform);
      return await broker(input, init);
    } catch (err) {
      if (err instanceof TypeError) Error.captureStackTrace(err, fetch);
      throw err;
    }
  };
  // The Worker's location, and the base of its own Workers' relative
  // specifiers, are the job module's URL (the platform's, for a Worker
  // started from it), not the wrapper's blob: URL.
  const here = new URL(import.meta.url);
  const job = URL.parse(decodeURIComponent(here.hash.slice(1)));
  here.hash = "";
  if (job !== null) locate(job);
  brokerWorkers(call, ready, here.href, job?.href);
}

// locate makes the Worker's location name url, as a Worker started from
// url has it.
function locate(url) {
  const at = Object.freeze({
    href: url.href, origin: url.origin, protocol: url.protocol, host: url.host, hostname: url.hostname,
    port: url.port, pathname: url.pathname, search: url.search, hash: url.hash,
    toString: () => url.href,
  });
  try {
    Object.defineProperty(globalThis, "location", { get: () => at, configurable: true, enumerable: true });
  } catch { /* the platform's stays */ }
}

// noArgs gives the Worker the arguments a Worker of `deno run
// /job/main.js` has, none, where Deno hands it the bootstrap's: the job's
// path (Deno.args, and process.argv after its first two).
function noArgs() {
  try {
    Object.defineProperty(Deno, "args", { value: [], enumerable: true, configurable: true, writable: false });
  } catch { /* a Deno whose namespace is sealed: the arguments stay */ }
  const boot = Deno[Deno.internal]?.__nodeBootstrapArgs;
  if (boot != null && Array.isArray(boot.denoArgs)) boot.denoArgs = [];
}

// A Worker loads this module first (channel.js's wrapper), and adopts as
// it is evaluated, before the job's worker module is.
noArgs();
adopt();
