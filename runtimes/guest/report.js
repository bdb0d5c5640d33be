// How a Deno guest's outcome is put into words for its author: errors
// described with the guest's own locations and nothing of pmjail's, and a
// handler's value checked to survive JSON unchanged. The host re-checks
// sizes and depths; nothing here is trusted by it.

// MAX_CAUSES bounds an error's cause chain as reported (a cycle of causes
// is possible).
const MAX_CAUSES = 8;
// The longest message, stack and value an error report carries, in UTF-16
// units: enough for any real error, and well inside a frame.
const MAX_MESSAGE = 8 << 10;
const MAX_STACK = 32 << 10;
const MAX_VALUE = 64 << 10;

// PMJAIL_PATH matches what names pmjail's own files in a message or a
// stack: the bootstrap and channel at /pmjail, and Deno's built-in
// modules, which mean nothing to a guest's author.
const PMJAIL_PATH = /file:\/\/\/pmjail\/|(?:^|[\s(])\/pmjail\/|\bext:[a-z_]+\//;

// describe turns what the guest threw into the error frame's object:
// {name, message, stack, value?, cause?}. An Error keeps its own
// properties (code among them) as value; anything else thrown is value
// itself, as JSON, under the name ThrownValue.
export function describe(thrown, depth = 0) {
  if (!isError(thrown)) {
    const text = safeJSON(thrown);
    const out = {
      __proto__: null,
      name: "ThrownValue",
      message: clip(`threw a non-Error value: ${text ?? safeString(thrown)}`, MAX_MESSAGE),
      stack: "",
    };
    if (text !== undefined && text.length <= MAX_VALUE) out.value = JSON.parse(text);
    return out;
  }
  let name = safeString(thrown.name ?? "Error");
  let message = safeString(thrown.message ?? "");
  let stack = typeof thrown.stack === "string" ? thrown.stack : "";
  const syntax = syntaxError(name, message);
  if (syntax) ({ name, message, stack } = syntax);
  // No prototype: the value and cause assigned below become its own even
  // where the guest put a setter or a getter of those names on
  // Object.prototype.
  const out = {
    __proto__: null,
    name: clip(name, 128),
    message: clip(scrub(message), MAX_MESSAGE),
    stack: clip(cleanStack(stack), MAX_STACK),
  };
  // A module that did not parse says so; Deno's own code
  // (ERR_MODULE_NOT_FOUND) on it would mislead.
  if (syntax) return out;
  const own = safeJSON(ownProperties(thrown));
  if (own !== undefined && own !== "{}" && own.length <= MAX_VALUE) out.value = JSON.parse(own);
  if ("cause" in thrown && thrown.cause !== undefined && depth < MAX_CAUSES) {
    out.cause = describe(thrown.cause, depth + 1);
  }
  return out;
}

function isError(v) {
  return v instanceof Error || (v !== null && typeof v === "object" && Error.isError?.(v) === true);
}

// ownProperties are an Error's own enumerable properties but those
// reported already: its cause (a chain of its own), and the name a
// subclass's constructor may set.
function ownProperties(err) {
  const props = { __proto__: null };
  for (const key of Object.keys(err)) {
    if (!REPORTED.has(key)) props[key] = err[key];
  }
  return props;
}

const REPORTED = new Set(["cause", "name", "message", "stack"]);

// syntaxError recognises a module that did not parse. Deno reports it
// from the dynamic import as a TypeError whose message is "SyntaxError:
// <what>", a code frame, and "at <url>:<line>:<col>"; the guest's author
// gets a SyntaxError naming their file:line:column.
function syntaxError(name, message) {
  if (name !== "TypeError" && name !== "SyntaxError") return null;
  const m = /^SyntaxError: ([^\n]*)((?:\n(?!\s+at )[^\n]*)*)\n\s+at (\S+:\d+:\d+)\s*$/.exec(message);
  if (!m) return null;
  const [, what, frame, where] = m;
  return {
    name: "SyntaxError",
    message: `${what} at ${where}`,
    stack: `SyntaxError: ${what}${frame}\n    at ${where}`,
  };
}

// cleanStack drops the frames of pmjail's bootstrap and of Deno's
// built-ins from a stack, and the "TypeError: " Deno's syntax report
// carries in its first line.
function cleanStack(stack) {
  return stack
    .split("\n")
    .filter((line) => !(/^\s+at /.test(line) && PMJAIL_PATH.test(line)))
    .map(scrub)
    .join("\n")
    .trimEnd();
}

// scrub removes pmjail's paths left in text (a message quoting a frame).
function scrub(text) {
  return PMJAIL_PATH.test(text) ? text.replace(/\S*(?:file:\/\/)?\/pmjail\/[^\s)]*|\bext:[a-z_]+\/[^\s)]*/g, "<pmjail>") : text;
}

function clip(s, n) {
  return s.length <= n ? s : s.slice(0, n) + "…[truncated]";
}

function safeString(v) {
  try {
    return String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

// safeJSON is v as JSON text, or undefined when v has no JSON form (a
// function, a cycle, a BigInt, a throwing getter).
function safeJSON(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return undefined;
  }
}

// checkValue returns null when value survives JSON.stringify and
// JSON.parse unchanged (but for object properties that are undefined,
// which JSON leaves out, as everyone expects), or else the reason it does
// not, naming the path: "value.items[2] is a function".
export function checkValue(value) {
  return walk(value, "value", [], 0);
}

// The deepest value checked; the host refuses deeper ones anyway.
const MAX_DEPTH = 64;

// UNSUPPORTED are the objects JSON.stringify turns into {} or a string
// that does not parse back to them.
const UNSUPPORTED = [
  [Map, "a Map (use Object.fromEntries(map))"],
  [Set, "a Set (use [...set])"],
  [WeakMap, "a WeakMap"],
  [WeakSet, "a WeakSet"],
  [Promise, "a Promise (await it)"],
  [RegExp, "a RegExp"],
  [Error, "an Error (return its message)"],
  [ArrayBuffer, "an ArrayBuffer (encode bytes as base64)"],
];

function walk(v, path, parents, depth) {
  switch (typeof v) {
    case "string":
    case "boolean":
      return null;
    case "number":
      return Number.isFinite(v) ? null : `${path} is ${v}, which JSON cannot hold`;
    case "undefined":
      return `${path} is undefined, which JSON cannot hold (use null)`;
    case "function":
      return `${path} is a function`;
    case "symbol":
      return `${path} is a symbol`;
    case "bigint":
      return `${path} is a BigInt (convert it to a string or a number)`;
  }
  if (v === null) return null;
  if (parents.includes(v)) {
    return `${path} refers back to ${parents.length === 1 ? "value" : "an enclosing object"} (a cycle)`;
  }
  if (depth >= MAX_DEPTH) return `${path} nests deeper than ${MAX_DEPTH} levels`;
  if (typeof v.toJSON === "function") {
    let j;
    try {
      j = v.toJSON();
    } catch (err) {
      return `${path}.toJSON() threw: ${safeString(err?.message ?? err)}`;
    }
    return j === v ? null : walk(j, path, parents, depth);
  }
  for (const [type, what] of UNSUPPORTED) {
    if (v instanceof type) return `${path} is ${what}`;
  }
  if (ArrayBuffer.isView(v)) return `${path} is a ${v.constructor?.name ?? "typed array"} (encode bytes as base64)`;
  if (!Array.isArray(v)) {
    const what = emptied(v);
    if (what) return `${path} is ${what}`;
  }
  parents.push(v);
  try {
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const why = walk(v[i], `${path}[${i}]`, parents, depth + 1);
        if (why) return why;
      }
      return null;
    }
    for (const key of Object.keys(v)) {
      const child = v[key];
      if (child === undefined) continue;
      const why = walk(child, path + pathKey(key), parents, depth + 1);
      if (why) return why;
    }
    return null;
  } finally {
    parents.pop();
  }
}

// HINTS say what to return instead of the platform objects emptied
// finds most often.
const HINTS = {
  Response: " (return await response.json() or .text())",
  Request: " (return await request.json() or .text())",
  Headers: " (use Object.fromEntries(headers))",
  URLSearchParams: " (use Object.fromEntries(params) or params.toString())",
  FormData: " (use Object.fromEntries(form))",
  Blob: " (return await blob.text())",
  File: " (return await file.text())",
  Generator: " (use [...generator])",
  AsyncGenerator: " (use await Array.fromAsync(generator))",
};

// emptied says what v is when JSON.stringify would turn it into {} and
// lose what it holds: an object with no own fields whose class keeps its
// state elsewhere, a platform object (a Response, Headers, a generator:
// a Symbol.toStringTag) or an instance of a class of getters. It is null
// for a plain object, an object with fields of its own (an instance is
// its fields, as JSON has it) and an instance of a class with nothing to
// lose.
function emptied(v) {
  const proto = Object.getPrototypeOf(v);
  if (proto === null || proto === Object.prototype || Object.keys(v).length > 0) return null;
  let held = false;
  for (let p = proto; p !== null && p !== Object.prototype && !held; p = Object.getPrototypeOf(p)) {
    held = Object.hasOwn(p, Symbol.toStringTag) ||
      Object.values(Object.getOwnPropertyDescriptors(p)).some((d) => typeof d.get === "function");
  }
  if (!held) return null;
  const tag = v[Symbol.toStringTag];
  const name = safeString(typeof tag === "string" && tag ? tag : (v.constructor?.name || "object"));
  return `${/^[AEIO]/.test(name) ? "an" : "a"} ${name}, which JSON turns into {}${Object.hasOwn(HINTS, name) ? HINTS[name] : ""}`;
}

function pathKey(key) {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}
