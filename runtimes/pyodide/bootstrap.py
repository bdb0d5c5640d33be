# pmjail's Python bootstrap, the module _pmjail_boot that loader.mjs bakes into
# the memory snapshot (or installs on a cold start) inside the jail. It offers the
# broker as the `pmjail` module, runs /job/main.py (a plain script, or a
# handler script defining `main(input)` or `main(input, ctx)`), and returns
# the outcome to the loader as JSON. Every check happens on the host; nothing here is trusted.
import ast
import json
import os
import sys
import types

from pyodide.ffi import can_run_sync, run_sync

DISABLED = "package installation is disabled in pmjail (unsupported)"

# A log call's reply as the host nearly always sends it (JSON.stringify's
# spelling in the loader).
_OK_NULL = '{"ok":true,"value":null}'


def _make_module(bridge, input_value):
    def call(method, params):
        promise = bridge.call(method, json.dumps(params))
        if not can_run_sync():
            raise RuntimeError(
                "pmjail broker calls block through JS Promise integration, "
                "which is not available in this context")
        return json.loads(run_sync(promise))

    async def call_async(method, params):
        return json.loads(await bridge.call(method, json.dumps(params)))

    mod = types.ModuleType("pmjail", "The pmjail broker: logging and brokered requests.")
    mod.input = input_value

    log = types.SimpleNamespace()
    log_sync = bridge.logSync
    for level in ("debug", "info", "warn", "error"):
        def emit(message, meta=None, _level=level):
            params = {"message": str(message)}
            if meta is not None:
                params["meta"] = meta
            if can_run_sync():
                # The fast path (logSync in the loader); None when another
                # call is in flight. json.dumps and json.loads each cost
                # about as much as the pipe's round trip here, so the
                # common case skips both.
                if meta is None and params["message"].isascii():
                    reply = log_sync(_level, params["message"])
                else:
                    reply = log_sync(_level, None, json.dumps(params))
                if reply is not None:
                    return {"ok": True, "value": None} if reply == _OK_NULL else json.loads(reply)
            return call("log." + _level, params)
        emit.__name__ = level
        setattr(log, level, emit)
    log.warning = log.warn
    mod.log = log

    def send(req):
        return call("request.send", dict(req))

    async def send_async(req):
        return await call_async("request.send", dict(req))

    mod.request = types.SimpleNamespace(send=send, send_async=send_async)
    return mod


class _RefusePackages:
    """Last on sys.meta_path: a module that is not in the standard library
    cannot be installed here, and the error says so instead of Pyodide's
    hint to use micropip. One of the standard library's that Pyodide
    leaves out (resource, pwd, curses, ...) is no package's either: that
    error says so, not to ask the operator for a wheel."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if "." in name:
            return None
        if name in sys.stdlib_module_names:
            raise ModuleNotFoundError(
                f"No module named {name!r}: Pyodide's Python, which pmjail runs Python on,"
                " leaves this standard-library module out; no package can add it (docs/guest-api.md)",
                name=name,
            )
        raise ModuleNotFoundError(
            f"No module named {name!r}: {DISABLED}; a job imports only the wheels"
            " the operator stored and allowed it (pmjail packages add, docs/packages.md)",
            name=name,
        )


class _Fetch:
    """First on sys.meta_path: once urllib.request is imported, its HTTP
    and HTTPS handlers open URLs with the global fetch, which is the
    broker's (fetch.js). Importing it up front would cost every run."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "urllib.request":
            return None
        import importlib.util

        sys.meta_path.remove(_Fetch)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, _Fetch)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchAfter(spec.loader)
        return spec


class _PatchAfter:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch_urllib(module)


def _patch_urllib(request):
    request.HTTPHandler.http_open = _urlopen
    request.HTTPHandler.https_open = _urlopen
    if hasattr(request, "HTTPSHandler"):
        request.HTTPSHandler.https_open = _urlopen


def _urlopen(self, req):
    # What urllib's own do_open returns, with the request made by fetch:
    # an HTTP error status is a response (HTTPErrorProcessor raises it), a
    # refusal or a network failure is URLError with fetch's reason.
    import http
    import http.client
    import io
    import socket
    import urllib.error
    import urllib.response

    from js import AbortSignal, Object, fetch
    from pyodide.ffi import JsException, to_js

    if not can_run_sync():
        raise urllib.error.URLError("urlopen blocks through JS Promise integration, which is not available in this context")
    data = req.data
    if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
        data = data.read() if hasattr(data, "read") else b"".join(data)
    init = {"method": req.get_method(), "headers": to_js(dict(req.header_items()), dict_converter=Object.fromEntries)}
    if data is not None:
        init["body"] = to_js(bytes(data))
    if req.timeout is not None and req.timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
        init["signal"] = AbortSignal.timeout(max(1, int(req.timeout * 1000)))
    try:
        res = run_sync(fetch(req.full_url, to_js(init, dict_converter=Object.fromEntries)))
        body = run_sync(res.arrayBuffer()).to_bytes()
    except JsException as exc:
        raise urllib.error.URLError(getattr(exc, "message", str(exc))) from None
    headers = http.client.HTTPMessage()
    for name, value in res.headers:
        headers[name] = value
    resp = urllib.response.addinfourl(io.BytesIO(body), headers, res.url, res.status)
    try:
        resp.reason = res.statusText or http.HTTPStatus(res.status).phrase
    except ValueError:
        resp.reason = ""
    resp.msg = resp.reason
    return resp


def _bind_pyfetch():
    # pyodide.http binds the global fetch when it is first imported; one
    # imported before the broker's fetch was installed gets it now.
    mod = sys.modules.get("pyodide.http._pyfetch")
    if mod is not None:
        from js import fetch

        mod._jsfetch = fetch


def _harden():
    # Only what a script may expect; the loader's own environment never
    # reaches here, and the snapshot's copy is replaced.
    os.environ.clear()
    os.environ.update({"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/nonexistent", "TMPDIR": "/tmp"})

    def no_process(*args, **kwargs):
        raise OSError("process creation is disabled in pmjail")

    for name in ("system", "popen", "execv", "execve", "spawnv", "spawnve", "fork", "forkpty"):
        if hasattr(os, name):
            setattr(os, name, no_process)

    # A top-level name no finder knows would end in Pyodide's hint to
    # install it with micropip; ours, last, says installing is disabled.
    sys.modules.pop("micropip", None)
    sys.meta_path.append(_RefusePackages)

    # Network access is fetch's, through the broker (the run binds
    # pyodide.http to it once the loader installed it: _bind_pyfetch).
    if "urllib.request" in sys.modules:
        _patch_urllib(sys.modules["urllib.request"])
    elif _Fetch not in sys.meta_path:
        sys.meta_path.insert(0, _Fetch)


def prepare():
    """What every run needs and no job decides, done by the loader before
    the runtime says it is ready: a daemon's warm runtime does it while it
    waits for a job, so the job's request does not wait for it. Nothing of
    a job is here, nor anything a job could tell from a runtime that did
    not prepare (the environment, the refusals and the urllib patch are
    as run would make them)."""
    _harden()
    # First uses cost a run far more than later ones (the entropy source
    # behind os.urandom is Deno's crypto, reached through Pyodide's glue;
    # a file's first write; compile and eval): pay them here. What they
    # make is thrown away, and random is reseeded once the job is taken.
    os.urandom(16)
    scratch = "/tmp/.pmjail-prepare"
    with open(scratch, "w", encoding="utf-8") as f:
        f.write("pass\n")
    os.remove(scratch)
    code = compile("pass\n", scratch, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    eval(code, {"__builtins__": __builtins__})
    json.loads(json.dumps({"kind": "done"}))


def _reseed():
    # A run from a memory snapshot starts from the very memory every other
    # run started from: anything seeded at start-up would repeat. random's
    # shared instance is the one such state in the preloaded modules
    # (SystemRandom, secrets and uuid4 read os.urandom every time). String
    # hash randomisation (PYTHONHASHSEED) is fixed per snapshot: dicts and
    # sets already built in the snapshot depend on it.
    import random

    random.seed()


def _traceback(exc, filename):
    import traceback

    tb = exc.__traceback__
    # Drop the bootstrap's own frames so the stack starts in the job's code.
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb, compact=True)
    # The frames of the bootstrap and of Pyodide's glue (a broker call's
    # run_sync) mean nothing to the script's author: drop them wherever
    # they are, in the chained exceptions too.
    seen = set()
    todo = [te]
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if not _ours(f.filename)])
        todo += [t.__cause__, t.__context__]
    return "".join(te.format())


def _ours(path):
    return path == __file__ or "/_pyodide/" in path or "/pyodide/" in path


# The longest cause chain an error report carries.
_MAX_CAUSES = 8
# What an error report carries at most of each part, as report.js has it
# for JavaScript: the report crosses in one frame (4 MiB), and an
# exception with a longer message (its traceback repeats it) ended the
# run as a protocol_error, not as the exception.
_MAX_MESSAGE = 8 << 10
_MAX_STACK = 32 << 10
_MAX_VALUE = 64 << 10
# An exception's name (its class's), as report.js cuts an Error's.
_MAX_NAME = 128


def _clip(s, n):
    return s if len(s) <= n else s[:n] + "…[truncated]"


def _describe(exc, filename, depth=0):
    message = str(exc)
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        # The script's author gets the place: file:line:column.
        message = f"{exc.msg} at {exc.filename}:{exc.lineno}:{exc.offset or 0}"
    out = {"name": _clip(type(exc).__name__, _MAX_NAME), "message": _clip(message, _MAX_MESSAGE), "stack": _clip(_traceback(exc, filename), _MAX_STACK)}
    # An exception's own attributes (a code, an errno) are its value, as
    # far as they are JSON and within _MAX_VALUE.
    props = {k: v for k, v in getattr(exc, "__dict__", {}).items() if not k.startswith("_")}
    if props:
        try:
            text = json.dumps(props, allow_nan=False)
            if len(text) <= _MAX_VALUE:
                out["value"] = json.loads(text)
        except (TypeError, ValueError):
            pass
    if exc.__cause__ is not None and depth < _MAX_CAUSES:
        out["cause"] = _describe(exc.__cause__, filename, depth + 1)
    return out


def _error(exc, filename):
    return {"kind": "error", "error": _describe(exc, filename)}


def _check(value, path="value", parents=None, depth=0):
    """The reason value does not survive json.dumps and json.loads
    unchanged, naming the path ("value.items[2] is a set"), or None."""
    if value is None or isinstance(value, (str, bool)):
        return None
    if isinstance(value, int):
        # The value crosses as a JavaScript number, exact only this far.
        if abs(value) > 2**53 - 1:
            return f"{path} is {value}, beyond the integers JSON carries exactly here (use a string)"
        return None
    if isinstance(value, float):
        return None if value == value and value not in (float("inf"), float("-inf")) else f"{path} is {value}, which JSON cannot hold"
    parents = parents if parents is not None else []
    if any(value is p for p in parents):
        return f"{path} refers back to {'value' if len(parents) == 1 else 'an enclosing object'} (a cycle)"
    if depth >= 64:
        return f"{path} nests deeper than 64 levels"
    parents.append(value)
    try:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                why = _check(item, f"{path}[{i}]", parents, depth + 1)
                if why:
                    return why
            return None
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return f"{path} has the key {key!r}, which is not a string (JSON would make it {json.dumps(str(key))})"
                why = _check(item, path + (f".{key}" if key.isidentifier() else f"[{json.dumps(key)}]"), parents, depth + 1)
                if why:
                    return why
            return None
    finally:
        parents.pop()
    hint = {set: " (use a list)", frozenset: " (use a list)", bytes: " (decode it, or encode it as base64)"}.get(type(value), "")
    what = "a function" if callable(value) else f"a {type(value).__name__}"
    return f"{path} is {what}{hint}"


def _positional(handler):
    # How many positional parameters main takes, None when it takes any
    # number (*args) or its code cannot be read (a callable object).
    code = getattr(handler, "__code__", None)
    if code is None or code.co_flags & 0x04:  # *args
        return None
    return code.co_argcount - (1 if hasattr(handler, "__self__") else 0)


def _call_main(handler, input_value, ctx):
    # def main(input) works as well as def main(input, ctx).
    if _positional(handler) == 1:
        return handler(input_value)
    return handler(input_value, ctx)


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


# The coroutine being driven, for where() to look into.
_driving = None


def _settle(value):
    # A coroutine (an async main, or a script with top-level await) is driven
    # to completion through JS Promise integration.
    global _driving
    if isinstance(value, types.CoroutineType):
        _driving = value
        try:
            return run_sync(value)
        finally:
            _driving = None
    return value


def where(job_dir):
    """Where the coroutine being driven waits, as "file:line" in the job's
    own code (the innermost such await), or None. The loader asks when its
    event loop ran empty with the coroutine unfinished."""
    at = None
    c = _driving
    while c is not None:
        frame = getattr(c, "cr_frame", None) or getattr(c, "gi_frame", None)
        if frame is not None and frame.f_code.co_filename.startswith(job_dir + "/"):
            at = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        c = getattr(c, "cr_await", None) or getattr(c, "gi_yieldfrom", None)
    return at


def _job_files(files_json, env_json, filename):
    # The job's other files, read-only beside its entry; the entry's
    # directory leads sys.path as a script's does in CPython, so `import
    # util` and a package's `from .lib import x` resolve there.
    job_dir = os.path.dirname(filename)
    files = json.loads(files_json)
    for path, text in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o444)
    sys.path.insert(0, job_dir)
    if files:
        _forget_listings(job_dir)
    env = json.loads(env_json)
    if env:
        os.environ.update(env)


def _enter_job_dir():
    # Python's working directory is the process's (the jail's spec gives
    # it the job's directory): a relative path names a job file, as where
    # the script's author ran it. Pyodide's file system keeps its own.
    from js import Deno

    try:
        cwd = Deno.cwd()
    except Exception:
        return
    os.makedirs(cwd, exist_ok=True)
    os.chdir(cwd)


def _forget_listings(job_dir):
    # What importlib.invalidate_caches() does for the job's directories,
    # and only for them: the finders of every other path entry saw nothing
    # change. Not that call itself: it imports importlib.metadata to reset
    # that module's cache, ~100 ms of a hello's CPU here (measured).
    for entry, finder in list(sys.path_importer_cache.items()):
        if (entry == job_dir or entry.startswith(job_dir + "/")) and hasattr(finder, "invalidate_caches"):
            finder.invalidate_caches()
    metadata = sys.modules.get("importlib.metadata")
    if metadata is not None:
        metadata.MetadataPathFinder.invalidate_caches()


def run(bridge, input_json, source, filename, files_json="{}", env_json="{}"):
    _reseed()
    _bind_pyfetch()
    _job_files(files_json, env_json, filename)
    _enter_job_dir()
    input_value = json.loads(input_json)
    pmjail = _make_module(bridge, input_value)
    sys.modules["pmjail"] = pmjail

    # The job's file also lives in Python's own file system, so tracebacks
    # and inspect show its lines; read-only, as the job's other files are.
    os.makedirs(os.path.dirname(filename), exist_ok=True)
    with open(filename, "w", encoding="utf-8") as f:
        f.write(source)
    os.chmod(filename, 0o444)

    main_ns = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.modules["__main__"].__dict__.update(main_ns)
    main_ns = sys.modules["__main__"].__dict__
    sys.argv = [filename]
    try:
        code = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        _settle(eval(code, main_ns))
        handler = main_ns.get("main")
        if handler is not None and not callable(handler):
            _flush()
            kind = type(handler).__name__
            message = (f"main is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a function: a handler script "
                       "defines def main(input) or def main(input, ctx)")
            return json.dumps({"kind": "error", "error": {"name": "TypeError", "message": message, "stack": ""}})
        # A main that takes no input is no handler: it is the script's own,
        # which it runs itself (if __name__ == "__main__": main()), as
        # python runs it.
        if handler is not None and _positional(handler) != 0:
            ctx = types.SimpleNamespace(host=pmjail, input=input_value)
            value = _settle(_call_main(handler, input_value, ctx))
            _flush()
            why = _check(value)
            if why:
                message = f"the returned value cannot be sent as JSON: {why}"
                return json.dumps({"kind": "error", "error": {"name": "ResultError", "message": message, "stack": ""}})
            return '{"kind": "done", "value": ' + json.dumps(value, allow_nan=False) + "}"
        _flush()
        return json.dumps({"kind": "done"})
    except SystemExit as exc:
        code = _exit_code(exc)
        _flush()
        return json.dumps({"kind": "exit", "code": code})
    except BaseException as exc:  # noqa: BLE001 -- every guest failure is reported
        _flush()
        return json.dumps(_error(exc, filename))
