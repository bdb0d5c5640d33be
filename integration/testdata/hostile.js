// A hostile guest for the security suite: it tries each escape and prints
// one JSON report. It refuses to run if it can tell it is not jailed.
{ let h = null; try { h = Deno.hostname(); } catch (e) { if (e?.name !== "NotCapable") throw e; }
  if (h !== null && h !== "pmjail") { console.error("not jailed"); Deno.exit(93); } }
const port = __PORT__, abs = "__ABSTRACT__", victim = __VICTIM__;
const out = {};
async function probe(name, f) {
  try { const v = await f(); out[name] = { ok: true, value: v }; }
  catch (e) { out[name] = { ok: false, name: e?.name, code: e?.code, message: String(e?.message ?? e).slice(0, 200) }; }
}
await probe("read_passwd", () => Deno.readTextFileSync("/etc/passwd").length);
await probe("read_hostname", () => Deno.readTextFileSync("/etc/hostname"));
await probe("read_root", () => [...Deno.readDirSync("/root")].length);
await probe("read_repo", () => [...Deno.readDirSync("/work/main")].length);
await probe("read_proc1_root", () => Deno.readTextFileSync("/proc/1/root/etc/passwd").length);
await probe("list_proc_self_root_up", () => [...Deno.readDirSync("/proc/self/root/..")].map(e => e.name));
await probe("read_traversal", () => Deno.readTextFileSync("../../../../../../etc/passwd").length);
await probe("list_root", () => [...Deno.readDirSync("/")].map(e => e.name).sort());
await probe("write_root", () => Deno.writeTextFileSync("/pmjail-probe", "x"));
await probe("write_tmp", () => Deno.writeTextFileSync("/tmp/pmjail-probe", "x"));
await probe("symlink_tmp", () => Deno.symlinkSync("/", "/tmp/rootlink"));
await probe("read_via_symlink", () => Deno.readTextFileSync("/tmp/rootlink/etc/passwd").length);
// The scratch directory is writable: a link there must not widen reads.
await probe("symlink_scratch", () => Deno.symlinkSync("/", Deno.env.get("TMPDIR") + "/rootlink"));
await probe("write_deno_dir", () => Deno.writeTextFileSync("/tmp/.deno/pmjail-probe", "x"));
await probe("dynamic_import_passwd", async () => (await import("/etc/passwd", { with: { type: "text" } })).default.length);
await probe("fetch_local", async () => (await fetch(`http://127.0.0.1:${port}/`)).status);
await probe("connect_tcp", async () => { const c = await Deno.connect({ hostname: "127.0.0.1", port }); c.close(); });
await probe("connect_udp", async () => { const c = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 }); await c.send(new TextEncoder().encode("x"), { transport: "udp", hostname: "127.0.0.1", port }); c.close(); });
await probe("resolve_dns", async () => await Deno.resolveDns("example.com", "A"));
await probe("connect_abstract", async () => { const c = await Deno.connect({ transport: "unix", path: "\0" + abs }); c.close(); });
await probe("command", async () => (await new Deno.Command("/bin/sh", { args: ["-c", "true"] }).output()).code);
await probe("env_get", () => Deno.env.get("PATH"));
await probe("env_all", () => Deno.env.toObject());
await probe("pid", () => Deno.pid);
await probe("proc_pids", () => [...Deno.readDirSync("/proc")].map(e => e.name).filter(n => /^\d+$/.test(n)));
await probe("uid", () => Deno.uid());
await probe("kill_host", () => Deno.kill(victim, "SIGKILL"));
await probe("ffi", () => Deno.dlopen("libc.so.6", { getpid: { parameters: [], result: "i32" } }).symbols.getpid());
await probe("net_ifaces", () => Deno.networkInterfaces().map(i => i.name));
console.log(JSON.stringify(out));
