// A several-file program: `pmjail run examples/app/` sends this directory,
// and main.ts (the default entry) imports ./util.ts as it would on disk.
// It greets the name on its stdin with the GREETING --env gives it: Deno
// may read only the names the job sets (another throws NotCapable), so it
// asks first.
import { greet } from "./util.ts";

const name = (await new Response(Deno.stdin.readable).text()).trim();
const given = Deno.permissions.querySync({ name: "env", variable: "GREETING" }).state === "granted";
console.log(greet(given ? Deno.env.get("GREETING")! : "hello", name || "world"));
