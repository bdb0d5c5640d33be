# pmjail's Python bootstrap, the module _pmjail_boot that loader.mjs bakes into
# the memory snapshot (or installs on a cold start) inside the jail. It offers the
# broker as the `pmjail` module, runs /job/main.py (a plain script, or a
# handler script defining `main(input, ctx)`), and returns the outcome to the
# loader as JSON. Every check happens on the host; nothing here is trusted.
import ast
import importlib
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
    hint to use micropip."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if "." in name:
            return None
        raise ModuleNotFoundError(f"No module named {name!r}: {DISABLED}", name=name)


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
    return "".join(te.format())


def _error(exc, filename):
    return {
        "kind": "error",
        "error": {
            "name": type(exc).__name__,
            "message": str(exc),
            "stack": _traceback(exc, filename),
        },
    }


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


def _settle(value):
    # A coroutine (an async main, or a script with top-level await) is driven
    # to completion through JS Promise integration.
    if isinstance(value, types.CoroutineType):
        return run_sync(value)
    return value


def _job_files(files_json, env_json, filename):
    # The job's other files, read-only beside its entry; the entry's
    # directory leads sys.path as a script's does in CPython, so `import
    # util` and a package's `from .lib import x` resolve there.
    for path, text in json.loads(files_json).items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o444)
    sys.path.insert(0, os.path.dirname(filename))
    importlib.invalidate_caches()
    os.environ.update(json.loads(env_json))


def run(bridge, input_json, source, filename, files_json="{}", env_json="{}"):
    _reseed()
    _harden()
    _job_files(files_json, env_json, filename)
    input_value = json.loads(input_json)
    pmjail = _make_module(bridge, input_value)
    sys.modules["pmjail"] = pmjail

    # The job's file also lives in Python's own file system, so tracebacks
    # and inspect show its lines.
    os.makedirs(os.path.dirname(filename), exist_ok=True)
    with open(filename, "w", encoding="utf-8") as f:
        f.write(source)

    main_ns = {"__name__": "__main__", "__file__": filename, "__builtins__": __builtins__}
    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.modules["__main__"].__dict__.update(main_ns)
    main_ns = sys.modules["__main__"].__dict__
    sys.argv = [filename]
    try:
        code = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        _settle(eval(code, main_ns))
        handler = main_ns.get("main")
        if callable(handler):
            ctx = types.SimpleNamespace(host=pmjail, input=input_value)
            value = _settle(handler(input_value, ctx))
            _flush()
            try:
                text = json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"main() returned a value that is not JSON-serialisable: {exc}") from None
            return '{"kind": "done", "value": ' + text + "}"
        _flush()
        return json.dumps({"kind": "done"})
    except SystemExit as exc:
        code = _exit_code(exc)
        _flush()
        return json.dumps({"kind": "exit", "code": code})
    except BaseException as exc:  # noqa: BLE001 -- every guest failure is reported
        _flush()
        return json.dumps(_error(exc, filename))
