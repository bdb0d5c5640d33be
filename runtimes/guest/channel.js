// The guest end of pmjail's channel (see ipc/PROTOCOL.md): length-prefixed
// JSON frames over two FIFOs in the job's private root, whose other ends the
// supervisor holds. Only Deno's own file API is used (no Node compatibility
// layer, which would cost ~100 ms a run). Every check happens on the host;
// nothing here is trusted by it.
export const CHANNEL_IN = "/pmjail/channel/in";
export const CHANNEL_OUT = "/pmjail/channel/out";

const MAX_FRAME = 4 << 20;
const encoder = new TextEncoder();
let decoder;

// decodeFrame decodes a frame's UTF-8. Frames are mostly ASCII, which
// String.fromCharCode takes as is: a run's first TextDecoder.decode costs
// ~0.2 ms, as much as the rest of reading the start frame.
function decodeFrame(bytes) {
  if (bytes.length <= 8192 && bytes.every((b) => b < 0x80)) return String.fromCharCode.apply(null, bytes);
  decoder ??= new TextDecoder();
  return decoder.decode(bytes);
}

export class Channel {
  #in;
  #out;
  #buf = new Uint8Array(0);
  #nextId = 1;
  #pending = new Map();
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
    this.#readStart();
  }

  // #readStart reads up to the start frame synchronously. The guest has
  // nothing to do before it, and the host sends it as the runtime starts,
  // so it is usually there already; an asynchronous read of a FIFO would
  // run on a thread Deno starts for it, which costs more than the wait
  // (user code starts ~0.3 ms earlier, measured).
  #readStart() {
    const chunk = new Uint8Array(64 << 10);
    try {
      while (this.#startResolve && this.#received(chunk, this.#in.readSync(chunk)));
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
      const chunk = new Uint8Array(64 << 10);
      while (this.#pending.size > 0 && this.#received(chunk, await this.#in.read(chunk)));
    } catch (err) {
      this.#closed(`channel broken: ${err?.message ?? err}`);
    } finally {
      this.#reading = false;
    }
  }

  // #received takes what one read returned (n bytes of chunk, or null at
  // the end of the host's stream) and dispatches the frames it completes;
  // false once the channel is closed.
  #received(chunk, n) {
    if (n === null) {
      this.#closed("channel closed");
      return false;
    }
    this.#append(chunk.subarray(0, n));
    this.#drain();
    return true;
  }

  #append(bytes) {
    const next = new Uint8Array(this.#buf.length + bytes.length);
    next.set(this.#buf, 0);
    next.set(bytes, this.#buf.length);
    this.#buf = next;
  }

  #drain() {
    while (this.#buf.length >= 4) {
      const n = new DataView(this.#buf.buffer, this.#buf.byteOffset).getUint32(0);
      // Only a corrupted host stream says this; waiting for that many bytes
      // would hold every call until the wall limit.
      if (n > MAX_FRAME) throw new Error(`a frame of ${n} bytes from the host is over the ${MAX_FRAME}-byte limit`);
      if (this.#buf.length < 4 + n) break;
      const frame = JSON.parse(decodeFrame(this.#buf.subarray(4, 4 + n)));
      this.#buf = this.#buf.slice(4 + n);
      this.#dispatch(frame);
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

  // #write sends one frame (JSON.stringify throws here, synchronously, for
  // a value that cannot cross). Frames are queued and written
  // asynchronously, so the guest keeps reading replies while it writes:
  // with both FIFOs full and both sides blocked in a write, neither would
  // ever read. The exception is the common sequential case — a small frame,
  // nothing queued, and no reply due but this call's own — where the host
  // is only reading, so a synchronous write cannot block for long and saves
  // a thread hop per call.
  #write(obj) {
    const body = encoder.encode(JSON.stringify(obj));
    const frame = new Uint8Array(4 + body.length);
    new DataView(frame.buffer).setUint32(0, body.length);
    frame.set(body, 4);
    if (!this.#flushing && frame.length <= 4096 && this.#pending.size <= 1) {
      let off = 0;
      while (off < frame.length) off += this.#out.writeSync(frame.subarray(off));
      return Promise.resolve();
    }
    this.#queue.push(frame);
    if (!this.#flushing) this.#flushing = this.#flush();
    return this.#flushing;
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
        let size = 0;
        for (const f of frames) size += f.length;
        const batch = new Uint8Array(size);
        let at = 0;
        for (const f of frames) {
          batch.set(f, at);
          at += f.length;
        }
        let off = 0;
        while (off < batch.length) off += await this.#out.write(batch.subarray(off));
      }
    } finally {
      this.#flushing = null;
    }
  }

  send(obj) {
    return this.#write(obj);
  }

  call(method, params) {
    if (this.#broken) {
      return Promise.resolve({ ok: false, error: { code: "internal", message: this.#broken } });
    }
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      try {
        this.#write({ type: "call", id, method, params: params ?? null }).catch((err) =>
          this.#closed(`channel broken: ${err?.message ?? err}`)
        );
      } catch (err) {
        this.#pending.delete(id);
        resolve({ ok: false, error: { code: "internal", message: String(err) } });
        return;
      }
      this.#pump();
    });
  }

  // callSync is call for a caller that cannot wait for a promise (Python's
  // synchronous broker calls, which would otherwise suspend the whole
  // WebAssembly stack and wake through an asynchronous read, several times
  // the pipe's round trip). It returns the reply, or null when another call
  // is in flight or a write is queued — then only the asynchronous path
  // keeps both FIFOs moving. With nothing else in flight the host is only
  // reading, so the synchronous write cannot wait on the guest, and the
  // reply is the next frame it sends.
  callSync(method, params) {
    if (this.#broken) return { ok: false, error: { code: "internal", message: this.#broken } };
    if (this.#pending.size > 0 || this.#reading || this.#flushing || this.#queue.length > 0) return null;
    let body;
    try {
      body = encoder.encode(JSON.stringify({ type: "call", id: this.#nextId, method, params: params ?? null }));
    } catch (err) {
      return { ok: false, error: { code: "internal", message: String(err) } };
    }
    const id = this.#nextId++;
    let reply = null;
    this.#pending.set(id, (r) => reply = r);
    try {
      const frame = new Uint8Array(4 + body.length);
      new DataView(frame.buffer).setUint32(0, body.length);
      frame.set(body, 4);
      let off = 0;
      while (off < frame.length) off += this.#out.writeSync(frame.subarray(off));
      this.#syncChunk ??= new Uint8Array(64 << 10);
      while (reply === null && this.#received(this.#syncChunk, this.#in.readSync(this.#syncChunk)));
    } catch (err) {
      this.#closed(`channel broken: ${err?.message ?? err}`);
    }
    return reply ?? { ok: false, error: { code: "internal", message: this.#broken ?? "channel closed" } };
  }

  #syncChunk = null;

  // finish sends the last frame and resolves once every frame is written;
  // the caller exits then. It throws, synchronously, for a frame that
  // cannot be serialised.
  finish(frame) {
    return this.#write(frame);
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
