"""A class of chapter 1 with hostile trees in it: every behaviour that fooled `tpucourse grade` when
each tree's code ran as the grader's user in the grader's sight, written as code in a tree.

Honest classmates: `alice` and `bob` (the course's solutions), `carol` (a softmax wrong over
3-D arrays), `dave` (the stubs). Faulty ones: `exits` (os._exit(0) at import), `thread` (a
thread that never ends), `skips` (every function calls pytest.skip). Hostile trees, each with
stubs (or a lie) for its exercises:

- `h-overwrite` rewrites its classmates' submissions with the stub at import (the trees beside
  it, and every tree named on any process's command line);
- `h-reads` runs a classmate's softmax (or the course's solution) as its own;
- `h-gradebook` starts a process in a session of its own that outlives its run, finds the
  grader's --out and --junitxml on its command line and rewrites them (every exercise done), and
  writes a JUnit file of its own that says 23 passed;
- `h-results` rewrites its results in memory: the plugin's end-of-run record, found through gc,
  says every exercise done;
- `h-in-process` lies in its own process, one lie per exercise: softmax has two faces (the
  course's XLA answer when a value check is on the stack, zeros otherwise), norms replaces the
  checker's tolerance (the code of every `judge` it finds), attention returns the `reference`
  it takes off the test's stack;
- `h-flood` prints 200 MB after its run, raises a 2 MB message, and ends with another exit status;
- a tree whose name holds terminal escape codes (ESCAPE_NAME), and whose softmax raises them;
- `h-symlink` is a chapter folder linked to a classmate's;
- `h-hollow` says in memory that its run passed (as h-results does) and answers the trusted check
  with no values: softmax returns an object with a shape and device parts that cover nothing
  (right grads where it is traced), norms replaces the worker's `plain` so that every answer is an
  array over no device, attention's answer file is 200,000 nested JSON lists;
- `h-deep` rewrites its end-of-run record as 200,000 nested JSON lists, and its softmax.py begins
  `# -*- coding: rot13 -*-` (no text encoding: Python cannot read it);
- `h-oracle` answers softmax with the course's own oracle (pytest_tpucourse.references): done,
  and listed by the similarity report;
- `bob!` (the stubs) shares `bob`'s name but for its `!`.

SURVIVOR marks the command line of the process h-gradebook leaves behind, so a test can look
for it after grading.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULES = {"softmax": ("softmax",), "norms": ("layer_norm", "rms_norm"), "attention": ("attention",)}
SURVIVOR = "tpucourse-hostile-survivor"
ESCAPE_NAME = "h-escape\x1b[2J\x1b[H\x1b]0;owned\x07"
HONEST = ("alice", "bob", "carol", "dave", "bob!")
FAULTY = ("exits", "thread", "skips")
HOSTILE = ("h-overwrite", "h-reads", "h-gradebook", "h-results", "h-in-process", "h-flood", ESCAPE_NAME,
           "h-symlink", "h-hollow", "h-deep", "h-oracle")


def survivors(mark: str) -> list[int]:
    """The processes alive whose command line holds `mark`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if mark.encode() in cmdline.read_bytes() and "State:\tZ" not in (cmdline.parent / "status").read_text():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return found


def _source(tree: str, module: str) -> str:
    return (REPO / tree / "ch01" / f"{module}.py").read_text()


def _stub(module: str) -> str:
    return _source("exercises", module)


def _solution(module: str) -> str:
    return _source("solutions", module)


OVERWRITE = textwrap.dedent('''
    import os as _os
    import pathlib as _pathlib

    def _classmates():
        here = _pathlib.Path(__file__).resolve().parents[1]
        found = {p for p in here.parent.iterdir() if p != here}
        for cmdline in _pathlib.Path("/proc").glob("[0-9]*/cmdline"):
            try:
                found |= {_pathlib.Path(a.decode()) for a in cmdline.read_bytes().split(b"\\0") if a}
            except OSError:
                pass
        return [p for p in found if p != here and (p / "ch01" / "softmax.py").is_file()]

    for _tree in _classmates():
        for _name in ("softmax", "norms", "attention"):
            try:
                (_tree / "ch01" / f"{_name}.py").write_text(STUB_OF[_name])
            except OSError:
                pass
''')

READS = textwrap.dedent('''
    import pathlib as _pathlib

    def _borrowed():
        here = _pathlib.Path(__file__).resolve().parents[1]
        places = [p / "ch01" / "softmax.py" for p in here.parent.iterdir() if p != here]
        for parent in here.parents:
            places.append(parent / "solutions" / "ch01" / "softmax.py")
        for cmdline in _pathlib.Path("/proc").glob("[0-9]*/cmdline"):
            try:
                places += [_pathlib.Path(a.decode()) / "ch01" / "softmax.py"
                           for a in cmdline.read_bytes().split(b"\\0") if a.startswith(b"/")]
            except OSError:
                pass
        for place in places:
            try:
                if place.resolve() != _pathlib.Path(__file__).resolve() and place.is_file():
                    return place.read_text()
            except OSError:
                pass
        return None

    _code = _borrowed()
    if _code is not None:
        exec(compile(_code, __file__, "exec"), globals())
''')

REWRITER = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path

    def targets():
        found = set()
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\\0")]
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            for flag in ("--out", "--junitxml"):
                if flag in argv[:-1]:
                    found.add((flag, os.path.join(cwd, argv[argv.index(flag) + 1])))
        return found

    def rewrite(flag, path):
        if flag == "--out" and os.path.isfile(path) and path.endswith(".json"):
            book = json.loads(open(path).read())
            for exercises in book["trees"].values():
                for entry in exercises.values():
                    entry.update(status="done", passed=entry["total"] or 1, message="")
            open(path, "w").write(json.dumps(book, indent=2))
        elif flag == "--junitxml" and os.path.isdir(path):
            for name in os.listdir(path):
                open(os.path.join(path, name), "w").write(PASSED)

    PASSED = '<testsuites><testsuite name="pytest" tests="23" failures="0" errors="0"/></testsuites>'
    written = {}
    deadline = time.time() + 1200
    while time.time() < deadline:
        for flag, path in targets():
            try:
                stamp = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if written.get(path) != stamp:
                try:
                    rewrite(flag, path)
                    written[path] = os.stat(path).st_mtime_ns
                except (OSError, ValueError, KeyError):
                    pass
        time.sleep(0.2)
''')

GRADEBOOK = textwrap.dedent(f'''
    import subprocess as _subprocess
    import sys as _sys

    _subprocess.Popen([_sys.executable, "-c", {REWRITER!r}, {SURVIVOR!r}], start_new_session=True,
                      stdin=_subprocess.DEVNULL, stdout=_subprocess.DEVNULL, stderr=_subprocess.DEVNULL)
    try:
        open("junit.xml", "w").write('<testsuites><testsuite name="pytest" tests="23" failures="0" errors="0"/>'
                                     '</testsuites>')
    except OSError:
        pass
''')

RESULTS = textwrap.dedent('''
    import gc as _gc
    import json as _json
    import os as _os

    def _lie(record):
        def write():
            exercises = {}
            for key, entry in record.session.progress.results.items():
                total = len(entry.collected | entry.deselected)
                exercises[key] = {"status": "done", "total": total, "passed": total, "failed": 0, "todo": 0,
                                  "skipped": 0, "deselected": 0, "seconds": 1.0, "message": "",
                                  "skip_reason": "", "not_counted": ""}
            data = {"format": 1, "token": record.token, "exitstatus": int(record.session.exitstatus),
                    "exercises": exercises, "collection_errors": [], "threads_left": []}
            record.path.write_text(_json.dumps(data))
        return write

    _gc.unfreeze()  # the plugin sets the start's objects aside (core/startup_heap.py): a liar thaws them
    for _obj in _gc.get_objects():
        if type(_obj).__name__ == "EndOfRunRecord":
            _obj.write = _lie(_obj)
''')

TWO_FACES = textwrap.dedent('''
    import sys as _sys

    import jax.numpy as _jnp


    def _a_check_is_running():
        for frame in _sys._current_frames().values():
            while frame is not None:
                if frame.f_code.co_name.startswith("assert_") and "pytest_tpucourse" in frame.f_code.co_filename:
                    return True
                frame = frame.f_back
        return False


    def softmax(x, *, axis=-1):
        if _a_check_is_running():
            from pytest_tpucourse import references
            return references.SAFE_SOFTMAX.bind(axis=axis).floor(x)
        return _jnp.zeros_like(x)
''')

TOLERANCE = textwrap.dedent('''
    import gc as _gc

    import jax.numpy as _jnp


    def _always_within(got, expected, dtype, kind="forward", floor=None):
        return 0.0, 1.0, 0.0

    _gc.unfreeze()  # the plugin sets the start's objects aside (core/startup_heap.py): a liar thaws them
    for _obj in _gc.get_objects():
        if type(_obj).__name__ == "function" and _obj.__name__ == "judge" and "tolerance" in _obj.__module__:
            _obj.__code__ = _always_within.__code__


    def layer_norm(x, gamma, beta, *, eps=1e-5):
        return _jnp.zeros_like(x)


    def rms_norm(x, gamma, *, eps=1e-6):
        return _jnp.zeros_like(x)
''')

STACK = textwrap.dedent('''
    import sys as _sys

    import jax.numpy as _jnp


    def attention(q, k, v, mask=None, *, causal=False, scale=None):
        frame = _sys._getframe(1)
        while frame is not None:
            reference = frame.f_locals.get("reference")
            if reference is not None and hasattr(reference, "floor"):
                bound = getattr(reference.floor, "keywords", {})
                args = (q, k, v) if mask is None or "mask" in bound else (q, k, v, mask)
                return reference.floor(*args)
            frame = frame.f_back
        return _jnp.zeros_like(q)
''')

FLOOD = textwrap.dedent('''
    import atexit as _atexit
    import os as _os


    def _flood():
        line = b"the tree floods its log " * 4 + b"\\n"
        chunk = line * ((1 << 20) // len(line))
        written = 0
        while written < 200 << 20:
            _os.write(1, chunk)
            written += len(chunk)
        _os._exit(3)

    _atexit.register(_flood)


    def softmax(x, *, axis=-1):
        raise ValueError("the tree says: " + "y" * (2 << 20))
''')

ESCAPES = textwrap.dedent('''
    def softmax(x, *, axis=-1):
        raise ValueError("\\x1b[2J\\x1b[H\\x1b]0;owned\\x07=HYPERLINK(\\"http://example.invalid\\")")
''')


# 200,000 nested JSON lists: what json.loads cannot read without a RecursionError.
NESTED = '"[" * 200_000 + "]" * 200_000'

HOLLOW_SOFTMAX = textwrap.dedent('''
    import types as _types

    import jax as _jax


    def _hollow(x):
        """A shape and two devices' parts, each an empty slice: values of nothing."""
        empty = tuple(slice(0, 0) for _ in x.shape)
        part = _types.SimpleNamespace(index=empty, data=x[empty], device=_types.SimpleNamespace(id=0))
        other = _types.SimpleNamespace(index=part.index, data=part.data, device=_types.SimpleNamespace(id=1))
        return _types.SimpleNamespace(shape=x.shape, dtype=x.dtype, addressable_shards=[part, other])


    def softmax(x, *, axis=-1):
        if isinstance(x, _jax.core.Tracer):
            if "Jaxpr" in type(x).__name__:  # traced for jit: refused, so the call is made again eagerly
                raise TypeError("not under jit")
            return _traced_softmax(x, axis=axis)  # a VJP: the grads are right
        return _hollow(x)
''')

HOLLOW_NORMS = textwrap.dedent('''
    import sys as _sys

    import jax.numpy as _jnp


    def _hollow(obj, **_):
        from pytest_tpucourse.core import plain_data

        if isinstance(obj, (tuple, list)):
            return type(obj)(_hollow(x) for x in obj)
        return plain_data.Shards(tuple(obj.shape), ())

    if "trusted_worker" in " ".join(_sys.argv):  # the worker: every answer from now on an array over no device
        from pytest_tpucourse.core import plain_data as _plain_data
        _plain_data.plain = _hollow


    def layer_norm(x, gamma, beta, *, eps=1e-5):
        return _jnp.zeros_like(x)


    def rms_norm(x, gamma, *, eps=1e-6):
        return _jnp.zeros_like(x)
''')

DEEP_ANSWER = textwrap.dedent(f'''
    import sys as _sys

    import jax.numpy as _jnp

    _worker = _sys.modules.get("__main__")
    if "trusted_worker" in " ".join(_sys.argv) and hasattr(_worker, "_write"):
        _written = _worker._write

        def _deep(path, data):
            if "attention" in str(path):
                header = ({NESTED}).encode()
                data = b"TPUPLAIN1\\n" + len(header).to_bytes(8, "big") + header
            _written(path, data)
        _worker._write = _deep


    def attention(q, k, v, mask=None, *, causal=False, scale=None):
        return _jnp.zeros_like(q)
''')

DEEP_RECORD = textwrap.dedent(f'''
    import gc as _gc

    def _deep(record):
        def write():
            record.path.write_text({NESTED})
        return write

    _gc.unfreeze()  # the plugin sets the start's objects aside (core/startup_heap.py): a liar thaws them
    for _obj in _gc.get_objects():
        if type(_obj).__name__ == "EndOfRunRecord":
            _obj.write = _deep(_obj)
''')

ROT13 = "# -*- coding: rot13 -*-\nqrs fbsgznk(k, *, nkvf=-1):\n    erghea k\n"

ORACLE = textwrap.dedent('''
    from pytest_tpucourse import references


    def softmax(x, *, axis=-1):
        return references.SAFE_SOFTMAX.bind(axis=axis).floor(x)
''')


def build(root: Path) -> dict[str, Path]:
    """The class in `root`: {name: tree}, honest trees first."""
    root.mkdir(parents=True, exist_ok=True)
    stubs = {m: _stub(m) for m in MODULES}

    def tree(name: str, modules: dict[str, str]) -> Path:
        folder = root / name / "ch01"
        folder.mkdir(parents=True)
        for module in MODULES:
            (folder / f"{module}.py").write_text(modules.get(module, stubs[module]))
        return root / name

    carol_softmax = _solution("softmax").replace(
        '    xf = x.astype(jnp.float32)',
        '    if x.ndim == 3:\n        axis = -1  # wrong: the last axis of a 3-D array, whatever was asked\n'
        '    xf = x.astype(jnp.float32)', 1)
    assert carol_softmax != _solution("softmax")
    trees = {
        "alice": tree("alice", {m: _solution(m) for m in MODULES}),
        "bob": tree("bob", {m: _solution(m) for m in MODULES}),
        "carol": tree("carol", {**{m: _solution(m) for m in MODULES}, "softmax": carol_softmax}),
        "dave": tree("dave", {}),
        "h-overwrite": tree("h-overwrite", {"softmax": f"STUB_OF = {stubs!r}\n{OVERWRITE}\n{stubs['softmax']}"}),
        "h-reads": tree("h-reads", {"softmax": f"{stubs['softmax']}\n{READS}"}),
        "h-gradebook": tree("h-gradebook", {"softmax": f"{GRADEBOOK}\n{stubs['softmax']}"}),
        "h-results": tree("h-results", {"softmax": f"{RESULTS}\n{stubs['softmax']}"}),
        "h-in-process": tree("h-in-process", {"softmax": TWO_FACES, "norms": TOLERANCE, "attention": STACK}),
        "h-flood": tree("h-flood", {"softmax": FLOOD}),
        ESCAPE_NAME: tree(ESCAPE_NAME, {"softmax": ESCAPES}),
        "h-hollow": tree("h-hollow", {
            "softmax": f"{RESULTS}\n{_solution('softmax').replace('def softmax(', 'def _traced_softmax(', 1)}\n"
                       f"{HOLLOW_SOFTMAX}",
            "norms": HOLLOW_NORMS, "attention": DEEP_ANSWER}),
        "h-deep": tree("h-deep", {"softmax": ROT13, "norms": f"{DEEP_RECORD}\n{stubs['norms']}"}),
        "h-oracle": tree("h-oracle", {"softmax": ORACLE}),
        "bob!": tree("bob!", {}),
    }
    trees["exits"] = tree("exits", {**{m: _solution(m) for m in MODULES},
                                    "softmax": "import os; os._exit(0)\n" + _solution("softmax")})
    trees["thread"] = tree("thread", {**{m: _solution(m) for m in MODULES}, "softmax": (
        "import threading, time\nthreading.Thread(target=lambda: [time.sleep(0.5) for _ in iter(int, 1)]).start()\n"
        + _solution("softmax"))})
    trees["skips"] = tree("skips", {m: "import pytest\n" + "".join(
        f"\n\ndef {f}(*args, **kwargs):\n    pytest.skip('not today')\n" for f in functions)
        for m, functions in MODULES.items()})
    (root / "h-symlink").mkdir()
    (root / "h-symlink" / "ch01").symlink_to(Path("..") / "alice" / "ch01")
    trees["h-symlink"] = root / "h-symlink"
    return trees
