"""The trusted check's worker: the one process of it that imports the graded tree.

    python -m pytest_tpucourse.classroom.trusted_worker --course ROOT --tree TREE --cases FILE

It reads the inputs of every case (core/plain_data.py: arrays, numbers, strings and the nodes
core/trusted_cases.py names), calls the tree's functions as a graded test calls them
(grading/tree.py: imported by path, each call within the deadline, TODO for a stub, the learner's
error in a few lines), and writes each exercise's results, as plain data, to
`trusted-<exercise>.bin` in its working folder as soon as that exercise is through, with the
files of the tree its calls ran (grading/unit_files.py: what the grader counts in the exercise's
unit, besides what it finds itself). It never
sees what a result should be: the grader, in its own process, judges them
(classroom/trusted_check.py). Whatever the tree does to this process can change only what it
answers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)

    from ..core import plain_data
    from ..core.course import load_course
    from .trusted_check import file_name

    request = plain_data.decode(Path(args.cases).read_bytes(), nodes=_Node)
    settings = request["settings"]
    _start_jax(settings, Path(args.course))

    from ..grading.context import GradingContext
    from ..grading.deadline import Deadline
    from ..grading.tree import GradedTree, Implementation

    course = load_course(Path(args.course))
    tree = GradedTree("impl-root", Path(args.tree).resolve())
    context = GradingContext(deadline=Deadline(float(settings["kernel_timeout"])))
    for exercise in request["exercises"]:
        implementation = Implementation(tree, course, exercise["chapter"], context)
        test_path = Path(args.course) / exercise["test_file"]
        context.touched.clear()
        results = [_run_case(implementation, exercise, case, test_path) for case in exercise["cases"]]
        files = sorted(_relative(path, tree.root) for path in context.unit_of(context.touched))
        _write(Path(file_name(exercise["key"])), plain_data.encode({"key": exercise["key"], "results": results,
                                                                   "files": [f for f in files if f]}))
    return 0


def _relative(path: str, root: Path) -> str:
    """A file the exercise's calls ran (grading/unit_files.py), relative to the tree ("" outside it)."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return ""


def _arguments(argv: list[str]):
    """--course ROOT --tree TREE --cases FILE, each once (the grader writes this command line)."""
    from types import SimpleNamespace

    names = ("--course", "--tree", "--cases")
    pairs = dict(zip(argv[::2], argv[1::2]))
    if len(argv) != 2 * len(names) or set(pairs) != set(names):
        raise SystemExit(f"usage: python -m {__spec__.name if __spec__ else 'trusted_worker'} "
                         f"--course ROOT --tree TREE --cases FILE")
    return SimpleNamespace(**{name[2:]: pairs[name] for name in names})


def _start_jax(settings: dict, course_root: Path) -> None:
    """JAX as a graded run has it: the simulated CPU devices, kernels under TPU interpret mode
    off a TPU, the compile caches of --jax-cache."""
    from ..grading import backend, compiled

    backend.force_cpu_devices(int(settings["cpu_devices"]))
    backend.select("auto")
    cache = settings.get("jax_cache") or "none"
    directory = backend.use_compilation_cache(None if cache == "none" else course_root / cache)
    kept = directory if directory is not None and directory.is_dir() else None
    compiled.compile_kernel_programs(None if kept is None else kept / compiled.KERNEL_PROGRAM_CACHE)


class _Node:
    """A node of the inputs (a mesh, an object a test file's builder makes), built when a case
    runs: an error building it is that case's, and a builder's test file is imported only then."""

    def __init__(self, kind: str, fields: dict):
        self.kind, self.fields = kind, fields


def _build(tree, test_path: Path, key: str):
    import jax.numpy as jnp

    if isinstance(tree, _Node):
        if tree.kind == "jax":
            return jnp.asarray(tree.fields["array"])
        if tree.kind == "mesh":
            from .trusted_check import make_mesh

            return make_mesh(int(tree.fields["devices"]), str(tree.fields["axis"]))
        if tree.kind == "built":
            from ..core.trusted_cases import test_module

            builder = getattr(test_module(test_path, key), str(tree.fields["builder"]))
            return builder(*_build(tree.fields.get("args", ()), test_path, key),
                           **_build(tree.fields.get("kwargs", {}), test_path, key))
        raise ValueError(f"an input node of kind {tree.kind!r}")
    if isinstance(tree, tuple):
        return tuple(_build(x, test_path, key) for x in tree)
    if isinstance(tree, list):
        return [_build(x, test_path, key) for x in tree]
    if isinstance(tree, dict):
        return {k: _build(v, test_path, key) for k, v in tree.items()}
    return tree


def _run_case(implementation, exercise: dict, case: dict, test_path: Path) -> dict:
    from ..core import plain_data
    from ..core.outcomes import GradingOutcome, Todo

    module, _, function = case["function"].rpartition(".")
    graded = getattr(getattr(implementation, module or exercise["module"]), function)
    try:
        args = _build(case["args"], test_path, exercise["key"])
        kwargs = _build(case["kwargs"], test_path, exercise["key"])
    except Exception as error:  # the course's builder failed here: say so, it is not the tree's answer
        return {"ok": False, "outcome": "input", "message": f"building the inputs raised "
                                                            f"{type(error).__name__}: {error}"}
    try:
        through = None
        if case.get("through"):
            from ..core.trusted_cases import test_module

            through = getattr(test_module(test_path, exercise["key"]), case["through"])
        if case["call"] == "vjp":
            cotangents = _build(case["cotangents"], test_path, exercise["key"])
            if through is not None:  # through(graded, args, cotangents, **kwargs) -> the grads
                out = through(graded, tuple(args), cotangents, **kwargs)
            else:
                _, out = graded.vjp(tuple(args), cotangents, **kwargs)
        elif through is not None:
            out = through(graded, *args, **kwargs)
        else:
            out = graded(*args, **kwargs)
    except Todo as outcome:
        return {"ok": False, "outcome": "todo", "message": outcome.headline}
    except GradingOutcome as outcome:
        return {"ok": False, "outcome": "error", "message": _few_lines(outcome.message)}
    except Exception as error:
        return {"ok": False, "outcome": "error", "message": f"{graded.display} raised {type(error).__name__}: "
                                                            f"{_few_lines(str(error))}"}
    try:
        return {"ok": True, "result": plain_data.plain(out)}
    except TypeError as error:
        return {"ok": False, "outcome": "error", "message": f"{graded.display} returned what the trusted check "
                                                            f"cannot read: {error}"}


def _few_lines(text: str, lines: int = 4) -> str:
    kept = [line.rstrip() for line in text.strip().splitlines() if line.strip()][:lines]
    return "\n".join(kept)


def _write(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def run_and_end() -> None:
    """main(), then the process's end at once: a thread or an exit handler the tree left cannot keep
    the worker (and its tree's grading) waiting past its answers, which are written whole by then."""
    import traceback

    try:
        status = main()
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
        if not isinstance(done.code, (int, type(None))):
            sys.stderr.write(f"{done.code}\n")
    except BaseException:  # said on stderr, whose last line the grader keeps
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream the tree closed
            pass
    os._exit(status)


if __name__ == "__main__":
    run_and_end()
