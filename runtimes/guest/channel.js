// The guest end of pmjail's channel (see ipc/PROTOCOL.md): length-prefixed
// JSON frames over two FIFOs in the job's private root, whose other ends the
// supervisor holds. Only Deno's own file API is used (no Node compatibility
// layer, which would cost ~100 ms a run). Every check happens on the host;
// nothing here is trusted by it.
export const CHANNEL_IN = "/pmjail/channel/in";
export const CHANNEL_OUT = "/pmjail/channel/out";

const MAX_FRAME = 4 << 20;
// READ_SIZE is the free space each read offers: a reply, or a whole
// burst of them, in one read.
const READ_SIZE = 64 << 10;
// SCRATCH_SIZE bounds the frames encoded in place (see #encode).
const SCRATCH_SIZE = 4096;
// PROMPT are the methods the host answers in its read loop, before it
// reads the next frame: a caller may wait for their reply in a
// synchronous read. request.send waits on the network, so it never does.
const PROMPT = new Set(["log.debug", "log.info", "log.warn", "log.error", "input.get"]);
// NOTE_HEAD is, per log method, a note's JSON up to its message, which
// follows as a JSON string and "}}": built so, a note costs one
// stringify of a string (cheaper than of an object while V8's code for
// it is cold, as in a run's first calls).
const NOTE_HEAD = new Map(
  ["log.debug", "log.info", "log.warn", "log.error"].map((m) => [m, `{"type":"note","method":"${m}","params":{"message":`]),
);
// HTML_SAFE finds what encoding/json escapes and JSON.stringify does not:
// <, > and & (one byte each, six as \u003c) and U+2028, U+2029 (three,
// six as \u2028). The host counts a log's message as encoding/json
// writes it, and a note's credit must not count fewer bytes than it.
const HTML_SAFE = /[<>&\u2028\u2029]/;

// htmlSafeExtra is how many more bytes s takes HTML-safe than in
// JSON.stringify's form: the host bounds a result's value so too.
export function htmlSafeExtra(s) {
  if (!HTML_SAFE.test(s)) return 0;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x3c || c === 0x3e || c === 0x26) n += 5;
    else if (c === 0x2028 || c === 0x2029) n += 3;
  }
  return n;
}

const encoder = new TextEncoder();
let decoder;

// decodeFrame decodes a frame's UTF-8. Frames are mostly ASCII, which
// String.fromCharCode takes as is: a run's first TextDecoder.decode costs
// ~0.2 ms, as much as the rest of reading the start frame.
function decodeFrame(bytes) {
  if (bytes.length <= 8192 && isASCII(bytes)) return String.fromCharCode.apply(null, bytes);
  decoder ??= new TextDecoder();
  return decoder.decode(bytes);
}

function isASCII(bytes) {
  for (let i = 0; i < bytes.length; i++) if (bytes[i] >= 0x80) return false;
  return true;
}

export class Channel {
  #in;
  #out;
  // What the host sent and the guest has not dispatched yet is
  // #buf[#head, #tail): reads land in place, after #tail, and a frame is
  // parsed where it lies, so a large start frame is copied once, by the
  // kernel, not once per read.
  #buf = new Uint8Array(READ_SIZE);
  #view = new DataView(this.#buf.buffer);
  #head = 0;
  #tail = 0;
  // #scratch holds a small frame while it is written synchronously.
  #scratch = new Uint8Array(SCRATCH_SIZE);
  #nextId = 1;
  #pending = new Map();
  // #credit is the host's word, in a log reply, of how much more logging
  // it accepts (ipc/PROTOCOL.md): within it a log call goes out as a note,
  // answered here, and the guest does not wait a round trip for a reply
  // it knows. #lastCall is the id of the last frame sent while it is a
  // call: a reply's credit counts every frame before it, so only the
  // reply to the last one sent is current.
  #credit = null;
  #lastCall = 0;
  #reading = false;
  // #broken says why the channel is unusable, once it is: calls then fail
  // at once instead of waiting for a reply that cannot come.
  #broken = null;
  #startResolve;
  #startReject;
  started;

  // The paths are the jail's; tests pass their own.
  constructor(inPath = CHANNEL_IN, outPath = CHANNEL_OUT) {
    this.#out = Deno.openSync(outPath, { write: true });
    this.#in = Deno.openSync(inPath, { read: true });
    this.started = new Promise((resolve, reject) => {
      this.#startResolve = resolve;
      this.#startReject = reject;
    });
    this.#ready();
    this.#readStart();
  }

  // #ready tells the host the runtime has started and waits for its
  // start frame: a daemon keeps a runtime started ahead of its job idle
  // only from then (Deno's threads exist, its start is over); a cold
  // run's host skips it. The constructor runs once the runtime (Pyodide
  // included) is loaded, before any of the job's code.
  #ready() {
    try {
      const frame = this.#encode({ type: "ready" });
      let off = 0;
      while (off < frame.length) off += this.#out.writeSync(frame.subarray(off));
    } catch (err) {
      this.#closed(`channel broken: ${err?.message ?? err}`);
    }
  }

  // #readStart reads up to the start frame synchronously. The guest has
  // nothing to do before it, and the host sends it as the runtime starts,
  // so it is usually there already; an asynchronous read of a FIFO would
  // run on a thread Deno starts for it, which costs more than the wait
  // (user code starts ~0.3 ms earlier, measured).
  #readStart() {
    try {
      while (this.#startResolve && this.#received(this.#in.readSync(this.#space())));
    } catch (err) {
      this.#closed(`channel broken: ${err?.message ?? err}`);
    }
  }

  // #readReply waits for call id's reply in synchronous reads. An
  // asynchronous read costs a hop to a thread of Deno's and back per
  // reply, most of a call's time; a synchronous one is a plain read(2).
  // call takes this path only when the wait is short and nothing else can
  // take the bytes: the host answers the method in its read loop (PROMPT),
  // the call's frame is written already, and no asynchronous read is
  // outstanding (it would race this one for the reply). Timers and other
  // work wait no longer than the host's answer, as they would behind any
  // synchronous code.
  #readReply(id) {
    try {
      while (this.#pending.has(id) && this.#received(this.#in.readSync(this.#space())));
    } catch (err) {
      this.#closed(`channel broken: ${err?.message ?? err}`);
    }
  }

  // #pump reads frames while a reply is awaited: an idle channel holds no
  // read, so a finished script can exit.
  async #pump() {
    if (this.#reading) return;
    this.#reading = true;
    try {
      while (this.#pending.size > 0 && this.#received(await this.#in.read(this.#space())));
    } catch (err) {
      this.#closed(`channel broken: ${err?.message ?? err}`);
    } finally {
      this.#reading = false;
    }
  }

  // #space is where the next read goes: the free end of the buffer, grown
  // to hold at least the frame that is arriving whole, or READ_SIZE.
  #space() {
    let want = READ_SIZE;
    if (this.#tail - this.#head >= 4) {
      // The header was checked against MAX_FRAME when it arrived.
      want = Math.max(want, 4 + this.#view.getUint32(this.#head) - (this.#tail - this.#head));
    }
    if (this.#buf.length - this.#tail < want) {
      const held = this.#tail - this.#head;
      if (this.#buf.length - held >= want) {
        this.#buf.copyWithin(0, this.#head, this.#tail);
      } else {
        const buf = new Uint8Array(held + want);
        buf.set(this.#buf.subarray(this.#head, this.#tail), 0);
        this.#buf = buf;
        this.#view = new DataView(buf.buffer);
      }
      this.#head = 0;
      this.#tail = held;
    }
    return this.#buf.subarray(this.#tail);
  }

  // #received takes what one read returned (n bytes, read into #space, or
  // null at the end of the host's stream) and dispatches the frames it
  // completes; false once the channel is closed.
  #received(n) {
    if (n === null) {
      this.#closed("channel closed");
      return false;
    }
    this.#tail += n;
    this.#drain();
    return true;
  }

  #drain() {
    while (this.#tail - this.#head >= 4) {
      const n = this.#view.getUint32(this.#head);
      // Only a corrupted host stream says this; waiting for that many bytes
      // would hold every call until the wall limit.
      if (n > MAX_FRAME) throw new Error(`a frame of ${n} bytes from the host is over the ${MAX_FRAME}-byte limit`);
      if (this.#tail - this.#head < 4 + n) break;
      const frame = JSON.parse(decodeFrame(this.#buf.subarray(this.#head + 4, this.#head + 4 + n)));
      this.#head += 4 + n;
      if (this.#head === this.#tail) this.#reset();
      this.#dispatch(frame);
    }
  }

  // #reset empties the buffer, and lets go of one a large frame grew.
  #reset() {
    this.#head = this.#tail = 0;
    if (this.#buf.length > 4 * READ_SIZE) {
      this.#buf = new Uint8Array(READ_SIZE);
      this.#view = new DataView(this.#buf.buffer);
    }
  }

  #dispatch(frame) {
    if (frame.type === "start" && this.#startResolve) {
      const resolve = this.#startResolve;
      this.#startResolve = null;
      resolve(frame);
    } else if (frame.type === "reply") {
      const p = this.#pending.get(frame.id);
      if (!p) return;
      this.#pending.delete(frame.id);
      if (frame.id === this.#lastCall) this.#credit = frame.credit ?? null;
      p(frame.ok ? { ok: true, value: frame.value ?? null } : { ok: false, error: frame.error });
    }
  }

  #closed(reason) {
    this.#broken ??= reason;
    if (this.#startResolve) {
      this.#startResolve = null;
      this.#startReject(new Error(this.#broken));
    }
    for (const [, resolve] of this.#pending) {
      resolve({ ok: false, error: { code: "internal", message: this.#broken } });
    }
    this.#pending.clear();
  }

  // #encode gives obj's frame (JSON.stringify throws here, synchronously,
  // for a value that cannot cross): a small one encoded in place in
  // #scratch, which the caller must use before the next #encode, or a
  // frame of its own.
  #encode(obj) {
    return this.#frame(JSON.stringify(obj));
  }

  // #frame is #encode for a frame's JSON text.
  #frame(text) {
    if (text.length <= SCRATCH_SIZE - 4) {
      const { read, written } = encoder.encodeInto(text, this.#scratch.subarray(4));
      if (read === text.length) {
        new DataView(this.#scratch.buffer).setUint32(0, written);
        return this.#scratch.subarray(0, 4 + written);
      }
    }
    const body = encoder.encode(text);
    const frame = new Uint8Array(4 + body.length);
    new DataView(frame.buffer).setUint32(0, body.length);
    frame.set(body, 4);
    return frame;
  }

  // #write sends one frame and reports whether it was written already
  // (synchronously) or is queued. Queued frames are written
  // asynchronously, so the guest keeps reading replies while it writes:
  // with both FIFOs full and both sides blocked in a write, neither would
  // ever read. The exception is the common sequential case (#writesNow)
  // where the host is only reading, so a synchronous write cannot block
  // for long and saves a thread hop per call.
  #write(frame, due = this.#pending.size) {
    if (this.#writesNow(frame, due)) {
      let off = 0;
      while (off < frame.length) off += this.#out.writeSync(frame.subarray(off));
      return true;
    }
    if (frame.buffer === this.#scratch.buffer) frame = frame.slice();
    this.#queue.push(frame);
    if (!this.#flushing) this.#flushing = this.#flush();
    return false;
  }

  // #writesNow: a small frame, nothing queued, and no reply due but the
  // frame's own (due counts the replies awaited, the frame's included).
  #writesNow(frame, due) {
    return !this.#flushing && frame.length <= SCRATCH_SIZE && due <= 1;
  }

  #queue = [];
  #flushing = null;

  // #flush writes whatever is queued, many frames per write: a burst of
  // calls costs a few writes, not one each.
  async #flush() {
    try {
      while (this.#queue.length > 0) {
        const frames = this.#queue;
        this.#queue = [];
        let batch = frames[0];
        if (frames.length > 1) {
          let size = 0;
          for (const f of frames) size += f.length;
          batch = new Uint8Array(size);
          let at = 0;
          for (const f of frames) {
            batch.set(f, at);
            at += f.length;
          }
        }
        let off = 0;
        while (off < batch.length) off += await this.#out.write(batch.subarray(off));
      }
    } finally {
      this.#flushing = null;
    }
  }

  // #written resolves once every frame so far is written.
  #written(sync) {
    return sync ? Promise.resolve() : this.#flushing ?? Promise.resolve();
  }

  send(obj) {
    return this.#written(this.#write(this.#encode(obj)));
  }

  call(method, params) {
    if (this.#broken) return Promise.resolve(this.#brokenReply());
    return new Promise((resolve) => this.#begin(method, params, resolve, false));
  }

  // callSync is call for a caller that cannot await (a blocking call from
  // Python): it returns the reply itself when the call can wait for it in
  // a synchronous read (see #readReply), and null, having sent nothing,
  // when it cannot; the caller then uses call.
  callSync(method, params) {
    if (this.#broken) return this.#brokenReply();
    let reply = null;
    return this.#begin(method, params, (r) => (reply = r), true) ? reply : null;
  }

  // #begin sends a call whose reply goes to resolve: read synchronously,
  // before #begin returns, when the host answers the method in its read
  // loop (PROMPT), the frame goes out synchronously and no asynchronous
  // read is outstanding (it would race this one for the reply); otherwise
  // through #pump, unless syncOnly, when it sends nothing and returns
  // false.
  #begin(method, params, resolve, syncOnly) {
    if (this.#credit !== null && this.#note(method, params, resolve)) return true;
    // The id is taken only by a call that goes out: one declined leaves
    // the next call the id the host expects next.
    const id = this.#nextId;
    let frame;
    try {
      // JSON.stringify throws here for a value that cannot cross.
      frame = this.#encode({ type: "call", id, method, params: params ?? null });
    } catch (err) {
      resolve({ ok: false, error: { code: "internal", message: String(err) } });
      return true;
    }
    const due = this.#pending.size + 1;
    const waitHere = PROMPT.has(method) && !this.#reading && this.#writesNow(frame, due);
    if (syncOnly && !waitHere) return false;
    this.#nextId++;
    this.#pending.set(id, resolve);
    this.#lastCall = id;
    // A log call's bytes are the host's to count (it cuts and scrubs);
    // any other call spends one call of the credit.
    if (this.#credit !== null && (NOTE_HEAD.has(method) || --this.#credit.calls < 0)) this.#credit = null;
    let sync;
    try {
      sync = this.#write(frame, due);
    } catch (err) {
      this.#pending.delete(id);
      resolve({ ok: false, error: { code: "internal", message: String(err) } });
      return true;
    }
    if (waitHere) {
      this.#readReply(id);
      return true;
    }
    if (!sync) this.#flushing.catch((err) => this.#closed(`channel broken: ${err?.message ?? err}`));
    this.#pump();
    return true;
  }

  // #note sends a log call of a message alone as a note and answers it
  // as the host would, when the credit covers it; false, having sent
  // nothing, when it does not. The message's bytes are counted as its
  // JSON's, never fewer than the host counts: escapes only lengthen it.
  #note(method, params, resolve) {
    const head = NOTE_HEAD.get(method);
    if (head === undefined || typeof params?.message !== "string") return false;
    for (const key in params) if (key !== "message") return false;
    const c = this.#credit;
    if (c.calls < 1 || c.logs < 1) return false;
    const frame = this.#frame(head + JSON.stringify(params.message) + "}}");
    // The message's JSON, quotes excluded; the host counts it HTML-safe,
    // as the result holds it.
    const bytes = frame.length - 4 - head.length - 4;
    const size = bytes + htmlSafeExtra(params.message);
    if (bytes > c.message || size > c.bytes || frame.length - 4 > c.frame) return false;
    c.calls--;
    c.logs--;
    c.bytes -= size;
    this.#lastCall = 0;
    try {
      // No reply is due for a note: it writes at once unless one is.
      if (!this.#write(frame)) this.#flushing.catch((err) => this.#closed(`channel broken: ${err?.message ?? err}`));
    } catch (err) {
      resolve({ ok: false, error: { code: "internal", message: String(err) } });
      return true;
    }
    resolve({ ok: true, value: null });
    return true;
  }

  #brokenReply() {
    return { ok: false, error: { code: "internal", message: this.#broken } };
  }

  // finish sends the last frame and resolves once every frame is written;
  // the caller exits then. It throws, synchronously, for a frame that
  // cannot be serialised.
  finish(frame) {
    this.#finished = true;
    return this.#written(this.#write(this.#encode(frame)));
  }

  #finished = false;

  // exiting tells the host the runtime exits with code and runs nothing of
  // the guest's any more: the host then ends the jail at once instead of
  // waiting for the runtime's own teardown (ipc/PROTOCOL.md, exit). It is
  // written only when it can be at once and last: no frame is queued, no
  // reply awaited, no last frame sent. Otherwise, or if the write fails,
  // the runtime just exits, as it would without it.
  exiting(code) {
    if (this.#finished || this.#broken || this.#flushing || this.#pending.size > 0) return;
    this.#finished = true;
    try {
      const frame = this.#encode({ type: "exit", code });
      let off = 0;
      while (off < frame.length) off += this.#out.writeSync(frame.subarray(off));
    } catch { /* the exit goes on */ }
  }
}

// makeHost builds the broker object a guest sees as `host` / `ctx.host`. It
// is a convenience only: tampering with it gains nothing, since the host
// re-checks every call.
export function makeHost(channel, input) {
  const log = {};
  for (const level of ["debug", "info", "warn", "error"]) {
    log[level] = (message, meta) =>
      channel.call(`log.${level}`, { message: String(message), ...(meta === undefined ? {} : { meta }) });
  }
  return Object.freeze({
    input,
    log: Object.freeze(log),
    request: Object.freeze({
      send: (req) => channel.call("request.send", req),
    }),
  });
}

// PORT marks the one message the making thread sends a Worker before any
// of its own (worker.js): the port for its calls, on which the job's
// declared capabilities follow first (fetch needs them to name a secret,
// as on the main thread).
export const PORT = "pmjail.port";

// brokerWorkers makes the Worker constructor start each Worker through
// worker.js's adopt (shim is worker.js's URL), its request.send calls
// answered by call: the main thread's channel, or, in a Worker, its own
// port upward. It lives here, not in worker.js, because the main thread
// sets it up before the job's first line, where each module more costs
// the run's start. A specifier
// Deno cannot start a Worker from as it is (a relative one: Deno has no
// base for it, or a classic Worker) goes to Deno unchanged, and fails as
// it would.
// capabilities may be a promise: a Worker learns them from its port.
// base, in a Worker, is its job module's URL, which a relative specifier
// is resolved against, as Deno resolves it against a Worker's location.
export function brokerWorkers(call, capabilities, shim, base = undefined) {
  const Platform = globalThis.Worker;
  if (typeof Platform !== "function") return;
  const post = Platform.prototype.postMessage;
  const terminate = Platform.prototype.terminate;
  globalThis.Worker = class Worker extends Platform {
    #port;
    constructor(specifier, options = undefined) {
      const url = URL.parse(String(specifier), base);
      const wrap = url !== null && options?.type === "module";
      super(wrap ? wrapper(shim, url.href) : specifier, options);
      if (!wrap) return;
      const { port1, port2 } = new MessageChannel();
      this.#port = port1;
      port1.onmessage = (m) => answer(m.data, port1, call);
      Reflect.apply(post, this, [{ [PORT]: true }, [port2]]);
      Promise.resolve(capabilities).then((c) => port1.postMessage({ capabilities: c }));
    }

    terminate() {
      if (#port in this) this.#port?.close();
      return Reflect.apply(terminate, this, []);
    }
  };
}

// wrapper is a module that adopts the Worker (worker.js does as it is
// evaluated), then loads the job's. Both are static imports: the Worker's
// messages wait for the wrapper's evaluation, which is the job module's
// own; a dynamic import would leave a turn between them in which a
// message the job's module had yet to listen for was dispatched, and lost.
// worker.js learns the job module's URL from its own URL's fragment.
function wrapper(shim, url) {
  const text = `import ${JSON.stringify(shim + "#" + encodeURIComponent(url))};\nimport ${JSON.stringify(url)};\n`;
  return URL.createObjectURL(new Blob([text], { type: "application/javascript" }));
}

// answer passes a Worker's call on and posts the reply back. Only
// request.send goes through: a Worker has no other use for the channel.
async function answer(msg, port, call) {
  const id = msg?.id;
  if (!Number.isSafeInteger(id)) return;
  const reply = msg.method === "request.send"
    ? await call("request.send", msg.params)
    : { ok: false, error: { code: "unsupported", message: `a Worker's calls are request.send only, not ${String(msg.method).slice(0, 80)}` } };
  try {
    port.postMessage({ id, reply });
  } catch { /* the Worker is gone */ }
}
