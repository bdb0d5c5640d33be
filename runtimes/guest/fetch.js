// fetch() through pmjail's broker. Request, Response and Headers stay
// Deno's own; only the network part changes: the request goes to the host
// as a request.send call, which makes every check that call makes
// (declared origins and methods, addresses, redirects, caps; see
// ipc/PROTOCOL.md). Bodies travel as base64 both ways, so every byte
// arrives as it was sent. Nothing here is a check: the host makes them all.

// NULL_BODY are the statuses a Response may not give a body.
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

// installFetch makes the global fetch the broker's. capabilities is the
// start frame's copy of the job's declared set: fetch names the secret
// the job maps to a request's origin, as a request.send caller would.
export function installFetch(channel, capabilities) {
  globalThis.fetch = brokerFetch(channel, capabilities, globalThis.fetch);
}

// brokerFetch is the broker's fetch without installing it; platform is
// Deno's own fetch, which reads data: and blob: URLs (they never reach a
// network).
export function brokerFetch(channel, capabilities, platform) {
  return makeFetch(channel, authByOrigin(capabilities), platform);
}

function makeFetch(channel, auth, local) {
  return async function fetch(input, init = undefined) {
    try {
      return await send(input, init);
    } catch (err) {
      // The stack starts at the guest's call, not in pmjail's files.
      // (A TypeError is fetch's own or the Request constructor's; an
      // abort's reason is the guest's and keeps its stack.)
      if (err instanceof TypeError) Error.captureStackTrace(err, fetch);
      throw err;
    }
  };

  async function send(input, init) {
    const req = new Request(input, init);
    const url = new URL(req.url);
    if (url.protocol === "data:" || url.protocol === "blob:") return local(req);
    if (req.redirect !== "follow") {
      throw new TypeError(`fetch: redirect "${req.redirect}" is not supported in pmjail: the broker follows redirects, checking each`);
    }
    req.signal.throwIfAborted();
    const params = { url: req.url, method: req.method, headers: Object.fromEntries(req.headers), body_encoding: "base64" };
    if (req.body !== null) params.body = new Uint8Array(await req.arrayBuffer()).toBase64();
    const name = auth.get(url.origin);
    if (name !== undefined) params.auth = name;
    const call = channel.call("request.send", params);
    // A Request made here from a URL has a signal of its own, which
    // nothing can abort: no listener to add and remove then.
    const reply = await (init?.signal != null || input instanceof Request ? untilAborted(call, req.signal) : call);
    if (!reply.ok) throw refused(reply.error);
    return response(reply.value, url);
  }
}

// response builds a platform Response from request.send's value.
function response(v, url) {
  if (v.status < 200 || v.status > 599) {
    throw new TypeError(`fetch failed: the origin answered ${v.status}, a status a Response cannot hold`);
  }
  const body = NULL_BODY.has(v.status) ? null : Uint8Array.fromBase64(v.body);
  const res = new Response(body, { status: v.status, statusText: reason(v.status_text), headers: v.headers });
  url.hash = "";
  // A constructed Response has no URL of its own; these say what the
  // platform's fetch would.
  Object.defineProperties(res, {
    url: { value: v.url ?? url.href, enumerable: true },
    redirected: { value: v.redirected === true, enumerable: true },
  });
  return res;
}

// reason is the origin's reason phrase as a Response may hold it, or
// empty: Response refuses one with characters outside Latin-1 (what was
// not UTF-8 arrives as U+FFFD) or controls.
function reason(text) {
  return typeof text === "string" && /^[\t\x20-\x7e\x80-\xff]*$/.test(text) ? text : "";
}

// refused is the TypeError fetch rejects with, as the platform's does for
// a network error; its message is the host's reason and its cause the
// reply's error ({code, message}).
function refused(error) {
  const code = error?.code ?? "internal";
  const message = String(error?.message ?? "no reason given");
  const text = code === "denied" ? `fetch denied: ${message}` : `fetch failed (${code}): ${message}`;
  return new TypeError(text, { cause: { code, message } });
}

// untilAborted settles as p does, or rejects with the signal's reason
// once it aborts (the host's call runs on; its reply is dropped).
function untilAborted(p, signal) {
  return new Promise((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    p.then((v) => {
      signal.removeEventListener("abort", abort);
      resolve(v);
    });
  });
}

// authByOrigin maps an origin, as URL spells it, to the secret the job
// names for it. The host checks the pair again against its own spelling.
function authByOrigin(capabilities) {
  const out = new Map();
  for (const [origin, name] of Object.entries(capabilities?.request?.auth ?? {})) {
    try {
      out.set(new URL(origin).origin, name);
    } catch { /* the host validated the job; an origin URL cannot read is left out */ }
  }
  return out;
}
