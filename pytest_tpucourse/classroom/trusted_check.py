"""The trusted check: a tree's values judged outside the tree's process (docs/grading.md).

For every graded exercise with trusted cases (its test file's `TRUSTED`, core/trusted_cases.py)
the grader draws the cases from a seed no tree sees, and computes in its own process what each
call must return: the reference's float64 oracle and its XLA floor, or the exact answer. A
worker process that imports the tree (classroom/trusted_worker.py) receives only the inputs,
calls the tree's functions and hands back plain results (core/plain_data.py); the grader judges
them with the course's tolerance rule (core/tolerance.py). Nothing the tree's code does in its
own process (its results rewritten in memory, the checker replaced, a kernel that answers with
XLA's result when it sees a check on its stack) reaches that judgement: only its answers to
inputs it has never seen do.

    check = TrustedCheck.prepare(course, ["ch11"], seed)       # once per class: draws, expectations
    verdicts = check.check_tree(runner)                        # per tree: {exercise: Verdict}

`runner` runs one command for one tree (classroom/tree_runner.py: the contract, and a runner
without isolation for one's own tree); in `tpucourse grade` it is the tree's sandbox
(sandbox.TreeSandbox), the same one its pytest run ran in.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core import plain_data
from ..core import trusted_cases as tc
from ..core.course import Course

AGREES = "agrees"
DISAGREES = "disagrees"
NOT_CHECKABLE = "not checkable"

CASES_FILE = "trusted-cases.bin"
WORKER = "pytest_tpucourse.classroom.trusted_worker"
REASON_CHARS = 600  # a verdict's reason, at most
# What a worker's answer may hold: generous for the course's arrays, bounded against a tree that
# answers with gigabytes.
ANSWER_LIMITS = plain_data.Limits(total_bytes=256 * 2**20, header_bytes=8 * 2**20)
FILES_SAID = 500  # files of the tree a worker may say one exercise ran (grading/unit_files.MAX_FILES)
CPU_DEVICES = 8  # the devices the multi-device cases need (grading/backend.DEFAULT_CPU_DEVICES)


@dataclass(frozen=True)
class Verdict:
    """The trusted check's word on one exercise of one tree."""

    verdict: str  # AGREES, DISAGREES or NOT_CHECKABLE
    reason: str = ""  # why it disagrees, or why it cannot be checked
    cases: int = 0  # how many calls were judged
    # The files of the tree its worker said its calls ran (relative to the tree): the worker's word,
    # which the confirmation adds to what the grader finds itself (classroom/isolated.py)
    files: tuple = ()

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "cases": self.cases, "reason": self.reason}


def file_name(key: str) -> str:
    """The file the worker writes an exercise's answers to."""
    return f"trusted-{key}.bin"


def seed_from(secret: bytes | None) -> int:
    """The cases' seed: from the instructor's secret (every shard given the same draws the same
    cases), else fresh for this grading."""
    import secrets

    if secret is None:
        return secrets.randbits(63)
    return int.from_bytes(hashlib.sha256(b"tpucourse trusted cases\0" + secret).digest()[:8], "big") >> 1


# ---------------------------------------------------------------- what each case must return


@dataclass
class Expectation:
    """What the grader computed for one case: per output leaf the oracle (float64) and the floor
    (its dtype fixes the output's), or one exact plain value."""

    case: tc.Case
    names: list[str] = field(default_factory=list)
    oracle: list = field(default_factory=list)
    floor: list = field(default_factory=list)
    structure: object = None  # the nesting of the floor's outputs (classroom: _shape_of)
    exact: object = None
    dtypes: list = field(default_factory=list)  # grads: each input's dtype, which its grad must have
    cotangents: object = None  # grads: what the worker pulls back
    problem: str = ""  # the case could not be prepared: a bug in the course's declaration


@dataclass
class PreparedExercise:
    key: str
    chapter: str
    module: str
    test_file: str  # relative to the course root
    expectations: list[Expectation]


@dataclass
class TrustedCheck:
    """The cases of a grading, drawn and computed once, checked against any number of trees."""

    course_root: Path
    exercises: dict[str, PreparedExercise]
    not_checkable: dict[str, str]  # exercise key -> why it has no trusted cases
    inputs: bytes  # CASES_FILE: what every tree's worker is sent
    settings: dict

    @classmethod
    def prepare(cls, course: Course, chapters, seed: int, *, keys=None, jax_cache: str = "none",
                kernel_timeout: float = 60.0) -> "TrustedCheck":
        """Draw every exercise's cases of these chapters (or only `keys`) and compute their answers."""
        from ..grading import backend

        backend.force_cpu_devices(CPU_DEVICES)
        exercises, not_checkable, requests = {}, {}, []
        for chapter in course.chapters:
            if chapter.id not in chapters:
                continue
            for exercise in chapter.exercises:
                if keys is not None and exercise.key not in keys:
                    continue
                test_path = course.root / exercise.test_path
                if not test_path.is_file():
                    continue
                try:
                    declared = tc.load(test_path, exercise.key)
                    if declared is None:
                        not_checkable[exercise.key] = (f"{exercise.test_path} declares no trusted cases: its "
                                                       f"tests judge what only the tree's own process can "
                                                       f"(docs/grading.md)")
                        continue
                    module = tc.test_module(test_path, exercise.key)
                    rng = np.random.default_rng([seed, zlib.crc32(exercise.key.encode())])
                    solution = _solution_of(course.root, chapter.id, exercise.name)
                    expectations = [_expect(case, module, solution) for case in declared.draw(rng)]
                    request = {"key": exercise.key, "chapter": chapter.id, "module": exercise.name,
                               "test_file": exercise.test_path,
                               "cases": [_request(e.case, module, e) for e in expectations]}
                except Exception as error:  # the course's declaration: say so, and grade the rest
                    not_checkable[exercise.key] = _clip(f"the trusted cases of {exercise.test_path} could not be "
                                                        f"prepared ({type(error).__name__}: {error})")
                    continue
                exercises[exercise.key] = PreparedExercise(exercise.key, chapter.id, exercise.name,
                                                           exercise.test_path, expectations)
                requests.append(request)
        settings = {"cpu_devices": CPU_DEVICES, "jax_cache": jax_cache, "kernel_timeout": kernel_timeout}
        inputs = plain_data.encode({"settings": settings, "exercises": requests}, node=_node_of)
        return cls(course.root, exercises, not_checkable, inputs, settings)

    def command(self, tree: str) -> list[str]:
        """The worker's command line, for a tree at `tree` as the command sees it."""
        return [sys.executable, "-m", WORKER, "--course", str(self.course_root), "--tree", tree,
                "--cases", CASES_FILE]

    def hand_back(self) -> list[str]:
        return [file_name(key) for key in self.exercises]

    def check_tree(self, runner, *, timeout: float) -> dict[str, Verdict]:
        """Every exercise's verdict for the tree `runner` runs commands for."""
        verdicts = {key: Verdict(NOT_CHECKABLE, why) for key, why in self.not_checkable.items()}
        if not self.exercises:
            return verdicts
        ran = runner.run(self.command(runner.tree), inputs={CASES_FILE: self.inputs},
                         hand_back=self.hand_back(), timeout=timeout)
        for key, prepared in self.exercises.items():
            verdicts[key] = self.judge(prepared, ran.files.get(file_name(key)), ran)
        return verdicts

    def judge(self, prepared: PreparedExercise, answer: bytes | None, ran) -> Verdict:
        """One exercise's verdict from its worker's answer (None: none came back)."""
        cases = len(prepared.expectations)
        if answer is None:
            return Verdict(DISAGREES, _clip(f"no answer from the tree's worker for {prepared.key}: "
                                            f"{_how_it_ended(ran)}"), cases)
        try:
            reply = plain_data.decode(answer, limits=ANSWER_LIMITS)
            results = reply["results"]
            if not isinstance(results, list) or len(results) != cases:
                raise plain_data.PlainDataError(f"{len(results) if isinstance(results, list) else 'no'} results "
                                                f"for {cases} cases")
        except (plain_data.PlainDataError, KeyError, TypeError) as error:
            return Verdict(DISAGREES, _clip(f"the worker's answer for {prepared.key} does not read: {error}"), cases)
        files = _files_said(reply.get("files") if isinstance(reply, dict) else None)
        for expectation, result in zip(prepared.expectations, results):
            try:
                why = judge_result(expectation, result)
            except Exception as error:  # an answer of a shape nothing here expects
                why = f"{expectation.case.describe()}: its answer could not be judged ({type(error).__name__}: {error})"
            if why is not None:
                return Verdict(DISAGREES, _clip(why), cases, files)
        return Verdict(AGREES, "", cases, files)


def _files_said(files) -> tuple:
    """The worker's list of the files its calls ran, kept where each is a plain relative path."""
    if not isinstance(files, list):
        return ()
    kept = [f for f in files[:FILES_SAID] if isinstance(f, str) and 0 < len(f) <= 400
            and not f.startswith("/") and ".." not in f.split("/")]
    return tuple(sorted(set(kept)))


def _how_it_ended(ran) -> str:
    if getattr(ran, "timed_out", False):
        return "it ran past its limit and was stopped"
    status = ran.exit_status
    last = next((line.strip() for line in reversed(_text(ran.stderr).splitlines()) if line.strip()), "")
    ended = f"it ended with exit status {status}" if status is not None and status >= 0 else \
        f"it was killed (status {status})"
    return ended + (f": {last}" if last else "")


def _text(data) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")


def _clip(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


# ---------------------------------------------------------------- the grader's side of a case


@dataclass(frozen=True)
class _JaxArray:
    """An input that is a jax.Array where the case gave one (the worker makes it one again)."""

    array: np.ndarray


def _node_of(obj):
    """A Built, Mesh or jax array input as the worker rebuilds it."""
    if isinstance(obj, _JaxArray):
        return {"kind": "jax", "array": obj.array}
    if isinstance(obj, tc.Built):
        return {"kind": "built", "builder": obj.builder.__name__, "args": obj.args, "kwargs": obj.kwargs}
    if isinstance(obj, tc.Mesh):
        return {"kind": "mesh", "devices": obj.devices, "axis": obj.axis}
    return None


def _as_numpy(tree):
    """Inputs as the worker is sent them: JAX arrays as numpy arrays marked to be JAX's again,
    numpy arrays as they are."""
    import jax

    if isinstance(tree, jax.Array):
        return _JaxArray(np.asarray(tree))
    if isinstance(tree, tc.Built):
        return tc.Built(tree.builder, _as_numpy(tree.args), _as_numpy(tree.kwargs), tree.label)
    if isinstance(tree, tuple):
        return tuple(_as_numpy(x) for x in tree)
    if isinstance(tree, list):
        return [_as_numpy(x) for x in tree]
    if isinstance(tree, dict):
        return {k: _as_numpy(v) for k, v in tree.items()}
    return tree


def _request(case: tc.Case, module, expectation: Expectation) -> dict:
    for node in _nodes(case.args, case.kwargs):
        if isinstance(node, tc.Built) and getattr(module, node.builder.__name__, None) is not node.builder:
            raise tc.TrustedCasesError(f"{module.__file__}: the builder {node.builder.__name__} of a trusted case "
                                       f"must be a module-level function of the test file")
    if case.through is not None and getattr(module, case.through.__name__, None) is not case.through:
        raise tc.TrustedCasesError(f"{module.__file__}: through={case.through.__name__} of a trusted case must be "
                                   f"a module-level function of the test file")
    request = {"function": case.function, "call": "vjp" if isinstance(case.check, tc.Grads) else "call",
               "args": _as_numpy(case.args), "kwargs": _as_numpy(case.kwargs),
               "through": case.through.__name__ if case.through is not None else None}
    if isinstance(case.check, tc.Grads):
        request["cotangents"] = _as_numpy(expectation.cotangents)
    return request


def _nodes(*trees):
    for tree in trees:
        if isinstance(tree, (tc.Built, tc.Mesh)):
            yield tree
            yield from _nodes(getattr(tree, "args", ()), getattr(tree, "kwargs", {}))
        elif isinstance(tree, (tuple, list)):
            yield from _nodes(*tree)
        elif isinstance(tree, dict):
            yield from _nodes(*tree.values())


def resolve(tree, module):
    """Inputs with their nodes built, in this process (the grader's, or the worker's)."""
    if isinstance(tree, tc.Built):
        return tree.builder(*resolve(tree.args, module), **resolve(tree.kwargs, module))
    if isinstance(tree, tc.Mesh):
        return make_mesh(tree.devices, tree.axis)
    if isinstance(tree, tuple):
        return tuple(resolve(x, module) for x in tree)
    if isinstance(tree, list):
        return [resolve(x, module) for x in tree]
    if isinstance(tree, dict):
        return {k: resolve(v, module) for k, v in tree.items()}
    return tree


def make_mesh(devices: int, axis: str):
    import jax
    from jax.sharding import AxisType

    available = jax.devices()
    if devices > len(available):
        raise ValueError(f"a trusted case needs {devices} devices; this process has {len(available)}")
    return jax.make_mesh((devices,), (axis,), devices=available[:devices], axis_types=(AxisType.Auto,))


def _resolved_reference(reference, module):
    """A Reference whose bound keywords may hold nodes (a mesh), with them built."""
    def bound(function):
        if isinstance(function, functools.partial):
            return functools.partial(function.func, *function.args, **resolve(function.keywords, module))
        return function
    return type(reference)(reference.name, bound(reference.oracle), bound(reference.floor))


def _solution_of(course_root: Path, chapter: str, module: str):
    """name -> that function of the course's solution module (imported on first use)."""
    def function(name: str):
        from ..grading.tree import import_file

        module_name, _, function_name = name.rpartition(".")
        return getattr(import_file(course_root / "solutions" / chapter / f"{module_name or module}.py"),
                       function_name)
    return function


def _expect(case: tc.Case, module, solution) -> Expectation:
    """What the case's call must return, computed here from the course's references (or, for
    expected=SOLUTION, its solution)."""
    import jax

    expectation = Expectation(case)
    args, kwargs = resolve(case.args, module), resolve(case.kwargs, module)
    check = case.check
    if isinstance(check, tc.Exact):
        if check.expected is tc.SOLUTION:
            function = solution(case.function)
            value = (case.through(function, *args, **kwargs) if case.through is not None
                     else function(*args, **kwargs))
        else:
            value = check.expected(*args, **kwargs) if callable(check.expected) else check.expected
        expectation.exact = plain_data.plain(value)
        return expectation
    reference = _resolved_reference(check.reference, module)
    if isinstance(check, tc.Values) and check.reference_args is not None:
        args = tuple(args[i] for i in check.reference_args)
    floor_out = jax.block_until_ready(jax.jit(reference.floor)(*args))
    if isinstance(check, tc.Values):
        with jax.enable_x64(True):
            oracle_out = jax.jit(reference.oracle)(*_as_float64(args))
            oracle_leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(oracle_out)]
        floor_leaves = [np.asarray(x) for x in jax.tree.leaves(floor_out)]
        if len(oracle_leaves) != len(floor_leaves):
            raise tc.TrustedCasesError(f"{case.describe()}: the oracle returns {len(oracle_leaves)} outputs and "
                                       f"the floor {len(floor_leaves)}")
        expectation.names = list(check.names or (["output"] if len(floor_leaves) == 1 else
                                                 [f"output[{i}]" for i in range(len(floor_leaves))]))
        expectation.oracle, expectation.floor = oracle_leaves, floor_leaves
        expectation.structure = _shape_of(plain_data.plain(floor_out))
        return expectation
    from ..strategies import cotangents_like

    cotangents = cotangents_like(floor_out, check.cotangent_seed)
    floor_grads = jax.jit(lambda a, c: jax.vjp(reference.floor, *a)[1](c))(tuple(args), cotangents)
    with jax.enable_x64(True):
        oracle_grads = jax.jit(lambda a, c: jax.vjp(reference.oracle, *a)[1](c))(
            _as_float64(tuple(args)), _as_float64(cotangents))
        oracle_grads = [np.asarray(g, np.float64) if name is not None else None
                        for name, g in zip(check.argnames, oracle_grads)]
    expectation.names = [f"grad {name}" if name else "" for name in check.argnames]
    expectation.oracle = oracle_grads
    expectation.floor = [np.asarray(g) if name is not None else None for name, g in zip(check.argnames, floor_grads)]
    expectation.dtypes = [np.asarray(a).dtype.name if hasattr(a, "dtype") else None for a in args]
    expectation.cotangents = cotangents
    return expectation


def _as_float64(tree):
    import jax
    import jax.numpy as jnp

    def widen(x):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.asarray(np.asarray(x, dtype=np.float64))
        return x
    return jax.tree.map(widen, tree)


def _shape_of(tree):
    """The nesting of a plain result: arrays as "array", sequences as lists, dicts by key."""
    if isinstance(tree, (np.ndarray, plain_data.Shards)):
        return "array"
    if isinstance(tree, (tuple, list)):
        return [_shape_of(x) for x in tree]
    if isinstance(tree, dict):
        return {k: _shape_of(v) for k, v in tree.items()}
    return type(tree).__name__


def _leaves(tree) -> list:
    if isinstance(tree, (tuple, list)):
        return [leaf for x in tree for leaf in _leaves(x)]
    if isinstance(tree, dict):
        return [leaf for k in tree for leaf in _leaves(tree[k])]
    return [tree]


# ---------------------------------------------------------------- judging one answer


def judge_result(expectation: Expectation, result) -> str | None:
    """None when the worker's result for this case is right, else why not (naming the call)."""
    case = expectation.case
    where = case.describe()
    if not isinstance(result, dict) or "ok" not in result:
        return f"{where}: the worker's answer is not a result"
    if not result["ok"]:
        message = str(result.get("message", "")).strip() or "failed"
        if result.get("outcome") == "todo":  # the stub: the same whatever the drawn case
            return message
        return f"{where}: {message}"
    got = result.get("result")
    check = case.check
    if isinstance(check, tc.Exact):
        expected = expectation.exact
        if check.compare is not None:
            try:
                why = check.compare(got, expected)
            except Exception as error:  # an answer shaped unlike any the compare reads
                why = f"its answer {_short(got, 120)} could not be judged ({type(error).__name__}: {error})"
        else:
            why = None if _equal(got, expected) else f"{check.what} is {_short(got)}; expected {_short(expected)}"
        return None if why is None else f"{where}: {why}"
    if isinstance(check, tc.Values):
        if _shape_of(got) != expectation.structure and not (
                len(expectation.oracle) == 1 and isinstance(got, (np.ndarray, plain_data.Shards))):
            return (f"{where}: returned {_describe(got)}; expected {len(expectation.oracle)} array(s) "
                    f"({', '.join(expectation.names)})")
        leaves = _leaves(got)
        for name, g, oracle, floor in zip(expectation.names, leaves, expectation.oracle, expectation.floor):
            why = tc.judge_array(g, oracle, floor, kind="forward", tol=check.tol, what=name)
            if why:
                return f"{where}: {why}"
        return None
    grads = got if isinstance(got, (tuple, list)) else None
    if grads is None or len(grads) != len(check.argnames):
        return f"{where}: the VJP returned {_describe(got)}; expected {len(check.argnames)} grads"
    for name, g, oracle, floor, dtype in zip(expectation.names, grads, expectation.oracle, expectation.floor,
                                             expectation.dtypes):
        if not name:
            continue
        why = tc.judge_array(g, oracle, floor, kind="grad", tol=check.tol, what=name, dtype=dtype)
        if why:
            return f"{where}: {why}"
    return None


def _equal(got, expected) -> bool:
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        return (isinstance(got, np.ndarray) and isinstance(expected, np.ndarray) and got.shape == expected.shape
                and got.dtype == expected.dtype and bool(np.array_equal(got, expected, equal_nan=got.dtype.kind == "f")))
    if isinstance(expected, float) and isinstance(got, float) and expected != expected:
        return got != got
    if isinstance(expected, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(expected) and all(
            _equal(g, e) for g, e in zip(got, expected))
    if isinstance(expected, dict):
        return isinstance(got, dict) and set(got) == set(expected) and all(_equal(got[k], expected[k]) for k in expected)
    return type(got) is type(expected) and got == expected or (
        isinstance(got, (int, float)) and isinstance(expected, (int, float))
        and not isinstance(got, bool) and not isinstance(expected, bool) and got == expected)


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"an array {value.dtype.name}{list(value.shape)}"
    if isinstance(value, plain_data.Shards):
        return f"an array {list(value.shape)} over {len(value.pieces)} devices"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} ({', '.join(_describe(v) for v in value[:4])})"
    return f"a {type(value).__name__}"


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------- one tree, from the command line


def main(argv: list[str]) -> int:
    """python -m pytest_tpucourse.classroom.trusted_check --course ROOT --tree TREE --exercises
    ch11.matmul,... --jax-cache DIR|none --out FILE: the trusted check of one tree, drawn afresh,
    run without isolation (tree_runner.Unisolated: one's own tree), the verdicts written to FILE as JSON
    ({exercise: Verdict.as_dict()}). `pytest --isolated` runs it in a process of its own, so
    that no expectation is computed where the tree's code has run."""
    import json

    from ..core.course import load_course
    from .tree_runner import Unisolated

    names = ("--course", "--tree", "--exercises", "--jax-cache", "--out")
    pairs = dict(zip(argv[::2], argv[1::2]))
    if len(argv) != 2 * len(names) or set(pairs) != set(names):
        raise SystemExit(f"usage: python -m {__name__} " + " ".join(f"{n} X" for n in names))
    course = load_course(Path(pairs["--course"]))
    keys = [k for k in pairs["--exercises"].split(",") if k]
    chapters = sorted({k.split(".")[0] for k in keys})
    check = TrustedCheck.prepare(course, chapters, seed_from(None), keys=keys, jax_cache=pairs["--jax-cache"])
    verdicts = check.check_tree(Unisolated(pairs["--tree"]), timeout=600.0 * len(chapters))
    Path(pairs["--out"]).write_text(json.dumps({k: {**v.as_dict(), "files": list(v.files)}
                                               for k, v in verdicts.items()}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
