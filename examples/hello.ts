// TypeScript runs on Deno with its types stripped.
const greeting: string = "hello from jailed TypeScript";
console.log(greeting);
