// The guest end of pmjail's channel (see ipc/PROTOCOL.md): length-prefixed
// JSON frames over the socketpair inherited as fd 3. Every check happens on
// the host; nothing here is trusted by it.
import net from "node:net";
import { Buffer } from "node:buffer";

const MAX_FRAME = 4 << 20;

export class Channel {
  #sock;
  #buf = Buffer.alloc(0);
  #nextId = 1;
  #pending = new Map();
  #startResolve;
  started;

  constructor(fd = 3) {
    this.started = new Promise((resolve) => (this.#startResolve = resolve));
    this.#sock = new net.Socket({ fd, readable: true, writable: true });
    this.#sock.on("data", (chunk) => this.#onData(chunk));
    this.#sock.on("error", () => {});
    this.#sock.on("close", () => {
      for (const [, p] of this.#pending) {
        p.resolve({ ok: false, error: { code: "internal", message: "channel closed" } });
      }
      this.#pending.clear();
    });
  }

  #onData(chunk) {
    this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : chunk;
    while (this.#buf.length >= 4) {
      const n = this.#buf.readUInt32BE(0);
      if (n > MAX_FRAME || this.#buf.length < 4 + n) break;
      const frame = JSON.parse(this.#buf.subarray(4, 4 + n).toString("utf8"));
      this.#buf = this.#buf.subarray(4 + n);
      this.#dispatch(frame);
    }
  }

  #dispatch(frame) {
    if (frame.type === "start") {
      this.#startResolve(frame);
    } else if (frame.type === "reply") {
      const p = this.#pending.get(frame.id);
      if (!p) return;
      this.#pending.delete(frame.id);
      this.#refresh();
      p.resolve(frame.ok ? { ok: true, value: frame.value ?? null } : { ok: false, error: frame.error });
    }
  }

  // Only outstanding calls keep the process alive: a plain script that is
  // done must be able to exit with the channel still open.
  #refresh() {
    if (this.#pending.size > 0) this.#sock.ref();
    else this.#sock.unref();
  }

  send(obj) {
    const body = Buffer.from(JSON.stringify(obj), "utf8");
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length, 0);
    return new Promise((resolve) => this.#sock.write(Buffer.concat([head, body]), () => resolve()));
  }

  call(method, params) {
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#pending.set(id, { resolve });
      this.#refresh();
      this.send({ type: "call", id, method, params: params ?? null }).catch(() => {});
    });
  }

  unref() {
    this.#refresh();
  }

  // finish sends the last frame and resolves once the kernel has it; the
  // caller exits right after.
  async finish(frame) {
    this.#sock.ref();
    await this.send(frame);
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
