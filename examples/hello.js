// A plain script: its console output and exit code are the result.
console.log("hello from a jailed Deno", Deno.version.deno);
