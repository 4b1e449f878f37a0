"""Which tree is graded, and the one way a graded test reaches the code it grades.

A graded test asks for the `impl` fixture and calls `impl.<module>.<function>(...)`.
The same test file then grades the learner's `exercises/chNN/`, the shipped
`solutions/chNN/` (`--solutions`), or any tree laid out like `solutions/`
(`--impl-root DIR`). Modules are imported by file path under a package name
unique to the tree, so exercises/ch11/matmul.py and solutions/ch11/matmul.py never
collide, and a chapter's modules may import each other with `from . import x`.

Every call into learner code goes through `LearnerFunction`, which turns what
can go wrong into a short outcome naming the function and the file to edit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from . import backend, deadline, vmem
from ..course import Course, Exercise
from ..outcomes import LearnerCodeError, Todo

MAX_MESSAGE_LINES = 6


@dataclass(frozen=True)
class GradedTree:
    """A directory holding chNN/ folders of implementations."""

    kind: str  # "exercises" (the learner's work), "solutions", or "impl-root"
    root: Path

    def describe(self, course_root: Path) -> str:
        shown = _relative(self.root, course_root)
        return {
            "exercises": f"{shown}/ (your work)",
            "solutions": f"{shown}/ (the shipped reference solutions)",
            "impl-root": f"{shown}/ (--impl-root)",
        }[self.kind]

    def chapter_dir(self, chapter_id: str) -> Path:
        return self.root / chapter_id

    @property
    def package_name(self) -> str:
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:10]
        return f"_tpucourse_graded_{self.kind.replace('-', '_')}_{digest}"


def graded_tree(course_root: Path, solutions: bool, impl_root: str | None) -> GradedTree:
    if impl_root is not None:
        return GradedTree("impl-root", Path(impl_root).resolve())
    if solutions:
        return GradedTree("solutions", course_root / "solutions")
    return GradedTree("exercises", course_root / "exercises")


class Implementation:
    """The modules of one chapter in the graded tree: `impl.matmul.matmul(x, y)`."""

    def __init__(self, tree: GradedTree, course: Course, chapter_id: str):
        self._tree = tree
        self._course = course
        self._chapter_id = chapter_id

    @property
    def chapter_dir(self) -> Path:
        return self._tree.chapter_dir(self._chapter_id)

    def __getattr__(self, module_name: str) -> LearnerModule:
        if module_name.startswith("_"):
            raise AttributeError(module_name)
        return LearnerModule(self._tree, self._course, self._chapter_id, module_name)

    def __repr__(self) -> str:
        return f"<implementation of {self._chapter_id} from {self.chapter_dir}>"


class LearnerModule:
    def __init__(self, tree: GradedTree, course: Course, chapter_id: str, name: str):
        self._tree = tree
        self._course = course
        self._chapter_id = chapter_id
        self._name = name

    @property
    def path(self) -> Path:
        return self._tree.chapter_dir(self._chapter_id) / f"{self._name}.py"

    @property
    def course_root(self) -> Path:
        return self._course.root

    def __getattr__(self, function_name: str) -> LearnerFunction:
        if function_name.startswith("_"):
            raise AttributeError(function_name)
        exercise = self._course.exercise(f"{self._chapter_id}.{self._name}")
        return LearnerFunction(self, function_name, exercise)

    def load(self) -> types.ModuleType:
        """Import the module by path; failures become a LearnerCodeError."""
        if not self.path.is_file():
            raise LearnerCodeError(
                f"{_relative(self.path, self.course_root)} does not exist: the graded tree has no module "
                f"{self._name!r} for {self._chapter_id}."
            )
        package = _chapter_package(self._tree, self._chapter_id)
        qualified = f"{package}.{self._name}"
        try:
            return importlib.import_module(qualified)
        except Exception as error:  # the learner's module failed to import
            sys.modules.pop(qualified, None)
            raise LearnerCodeError(
                f"importing {_relative(self.path, self.course_root)} failed:\n"
                + _describe_exception(error, self.path, self.course_root)
            ) from None


class GradedFunction:
    """Any callable under grading, called the way a graded test needs.

    Every call waits for its result, so an error inside an asynchronously
    dispatched kernel is charged to the function, not to the checker, and turns
    an exception into a short LearnerCodeError. Graded tests meet it as a
    LearnerFunction; the project's own tests wrap JAX's shipped kernels in it to
    grade them as if a learner had written them.
    """

    def __init__(self, function, display: str, path: Path | None = None,
                 course_root: Path | None = None):
        self._function = function
        self._display = display
        self._path = path
        self._course_root = course_root

    @property
    def display(self) -> str:
        return self._display

    def resolve(self):
        return self._function

    def __call__(self, *args, **kwargs):
        import jax

        function = self.resolve()

        def run():
            vmem.check(function, args, kwargs)
            return jax.block_until_ready(_compiled_or_eager(
                lambda: compiled(function, kwargs, "call")(*args),
                lambda: function(*args, **kwargs), args))

        with self._guarded():
            return deadline.call(run, key=_exact_call_key(function, args, kwargs))

    def jaxpr(self, *args, **kwargs):
        """The closed jaxpr of a call with these arguments (kwargs are static)."""
        import jax

        function = self.resolve()
        with self._guarded():
            return deadline.call(lambda: jax.make_jaxpr(lambda *a: function(*a, **kwargs))(*args))

    def vjp(self, args, cotangents, **kwargs):
        """(outputs, grads of every arg) for output cotangents, through the function's own VJP."""
        import jax

        function = self.resolve()

        def run():
            vmem.check(function, args, kwargs)

            def eager():
                outputs, pullback = jax.vjp(lambda *a: function(*a, **kwargs), *args)
                return outputs, pullback(cotangents)

            return jax.block_until_ready(_compiled_or_eager(
                lambda: compiled(function, kwargs, "vjp")(tuple(args), cotangents),
                eager, args))

        with self._guarded():
            return deadline.call(run)

    @contextlib.contextmanager
    def _guarded(self):
        try:
            with backend.quiet_callback_errors():
                yield
        except Exception as error:
            backend.reset_after_failure()
            raise self._outcome(error) from None

    def _outcome(self, error: Exception) -> Exception:
        if isinstance(error, deadline.DeadlineExceeded):
            return LearnerCodeError(_deadline_message(self.display, error))
        if isinstance(error, vmem.ScratchTooLarge):
            return LearnerCodeError(f"{self.display} {error}; nothing was run.")
        return LearnerCodeError(
            f"{self.display} raised:\n" + _describe_exception(error, self._path, self._course_root)
        )

    def derived(self, make, display: str) -> "GradedFunction":
        """A function built from this one (its gradient, say), graded as this one's code.

        make(function) -> callable. Failures are reported as this function's: a stub
        is still TODO, and an error still names the file to edit.
        """
        return DerivedFunction(self, make, display)

    def __repr__(self) -> str:
        return f"<graded function {self.display}>"


class DerivedFunction(GradedFunction):
    """make(base function), rebuilt when the base is reloaded; failures are the base's."""

    def __init__(self, base: GradedFunction, make, display: str):
        super().__init__(None, display)
        self._base = base
        self._make = make
        self._made: tuple | None = None  # (base function, derived function)

    def resolve(self):
        function = self._base.resolve()
        if self._made is None or self._made[0] is not function:
            self._made = (function, self._make(function))
        return self._made[1]

    def _outcome(self, error: Exception) -> Exception:
        return self._base._outcome(error)


class LearnerFunction(GradedFunction):
    """A function in the graded tree: imported on first use; a stub is TODO.

    A NotImplementedError raised from the learner's own file means the stub is
    still there (Todo); raised anywhere else it is an ordinary failure.
    """

    def __init__(self, module: LearnerModule, name: str, exercise: Exercise | None):
        super().__init__(None, "", module.path, module.course_root)
        self.module = module
        self.name = name
        self.exercise = exercise

    @property
    def path(self) -> Path:
        return self.module.path

    @property
    def display(self) -> str:
        return f"{self.name}() in {_relative(self.path, self.module.course_root)}"

    def resolve(self):
        module = self.module.load()
        function = getattr(module, self.name, None)
        if not callable(function):
            raise LearnerCodeError(
                f"{_relative(self.path, self.module.course_root)} has no function {self.name}(); "
                f"the graded tests call {self.module._name}.{self.name}(...)."
            )
        return function

    def _outcome(self, error: Exception) -> Exception:
        if isinstance(error, NotImplementedError) and _raised_in(error, self.path):
            return Todo(self._todo_message())
        return super()._outcome(error)

    def _todo_message(self) -> str:
        lines = [f"TODO: {self.display} is not written yet."]
        if self.exercise is not None:
            if self.exercise.summary:
                lines.append(f"  exercise: {self.exercise.summary}")
            if self.exercise.hints:
                lines.append(f"  hint: {self.exercise.hints[0]}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<learner function {self.display}>"


# ---------------------------------------------------------------- compiled calls
#
# Graded code is first run as one jitted program: op by op, JAX compiles every
# primitive of every distinct shape and dtype on its own, and a chapter of pure-JAX
# exercises spent most of its first run doing that (docs/speed.md has the times
# before and after). Code that cannot be traced (Python control flow
# on values, NumPy calls on arrays) or that fails in any way is run again eagerly,
# so the learner sees the error of their code as written, never a tracer's.

_COMPILED: dict = {}


def _compiled_or_eager(compiled, eager, args):
    """compiled() where every argument is a jax.Array, else (and after any failure) eager().

    Other arguments keep their eager meaning: traced, a Python 4096 ** 3 would
    overflow int32, and NumPy arrays would stop computing in NumPy's dtypes.
    """
    import jax

    if not all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(args)):
        return eager()
    try:
        return compiled()
    except Exception:
        backend.reset_after_failure()  # a kernel that failed must not poison the rerun
        return eager()


def compiled(function, kwargs, kind: str = "call"):
    """function(*args, **kwargs) ("call") or its VJP ("vjp") as one jitted program.

    "call" returns a callable of the positional args; "vjp" one of (args, cotangents)
    giving (outputs, grads). Keyword arguments that are arrays (masks) are traced;
    the others (block sizes, flags, scales) are compile-time, and the program is kept
    per (function, those values), so every call that binds the same ones shares one
    jit cache. Shared by the graded calls here and by the checker's oracles and floors.
    """
    import jax

    static = {k: v for k, v in kwargs.items() if not _is_array(v)}
    dynamic = {k: v for k, v in kwargs.items() if _is_array(v)}
    key = (function, tuple(sorted(static.items())), kind)
    try:
        program = _COMPILED.get(key)
    except TypeError:  # an unhashable setting: compile for this call alone
        key, program = None, None
    if program is None:
        if kind == "call":
            program = jax.jit(lambda *args, **traced: function(*args, **static, **traced))
        else:
            def vjp(args, cotangents, **traced):
                outputs, pullback = jax.vjp(lambda *a: function(*a, **static, **traced), *args)
                return outputs, pullback(cotangents)
            program = jax.jit(vjp)
        if key is not None:
            _COMPILED[key] = program
    return functools.partial(program, **dynamic) if dynamic else program


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _exact_call_key(function, args, kwargs):
    """The function and the exact argument values (array bytes hashed), or None if unhashable."""
    import jax
    import numpy as np

    try:
        leaves, tree = jax.tree.flatten((args, kwargs))
        values = tuple(
            (x.shape, str(x.dtype), hashlib.sha1(np.asarray(x).tobytes()).hexdigest())
            if hasattr(x, "shape") else repr(x)
            for x in leaves
        )
        return (id(function), tree, values)
    except Exception:
        return None


def _deadline_message(display: str, error: deadline.DeadlineExceeded) -> str:
    lines = [
        f"{display} did not finish within {error.seconds:g} s (--kernel-timeout): a wait that "
        f"nothing signals (a DMA or semaphore wait without its start or signal), or a loop "
        f"(pl.loop, lax.while_loop) that never ends.",
    ]
    if error.repeated:
        lines.append("  It hung earlier in this run with exactly these arguments: not run again.")
    elif error.still_running:
        lines.append("  It is a compiled loop that cannot be interrupted: it keeps one CPU core busy "
                     "until this pytest run ends; the other tests still run.")
    else:
        lines.append("  It was stopped; the other tests still run.")
    return "\n".join(lines)


def _chapter_package(tree: GradedTree, chapter_id: str) -> str:
    """Register (once) a package whose __path__ is the tree's chapter folder."""
    root_name = tree.package_name
    if root_name not in sys.modules:
        root = types.ModuleType(root_name)
        root.__path__ = [str(tree.root)]
        sys.modules[root_name] = root
    name = f"{root_name}.{chapter_id}"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(tree.chapter_dir(chapter_id))]
        package.__package__ = name
        sys.modules[name] = package
    return name


def _raised_in(error: BaseException, path: Path) -> bool:
    """Whether the innermost frame of the error's traceback is in `path`."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve() == path.resolve()


def _describe_exception(error: BaseException, learner_path: Path | None,
                        course_root: Path | None) -> str:
    """A few lines: the learner's deepest frame and the error's own message.

    Errors raised inside a kernel under TPU interpret mode reach us wrapped in a
    runtime error whose text holds a callback traceback; only its final
    `SomeError: message` line is the learner's business.
    """
    message = _root_message(error)
    lines = []
    learner_frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if learner_path is not None and Path(f.filename).resolve() == learner_path.resolve()
    ]
    if learner_frames:
        frame = learner_frames[-1]
        lines.append(f"  {_relative(Path(frame.filename), course_root)}:{frame.lineno} in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    text = message.splitlines() or [""]
    if len(text) > MAX_MESSAGE_LINES:
        text = text[:MAX_MESSAGE_LINES] + ["  ..."]
    lines.extend("  " + line for line in text)
    return "\n".join(lines)


def _root_message(error: BaseException) -> str:
    text = str(error)
    if type(error).__name__ == "JaxRuntimeError" or "Traceback (most recent call last)" in text:
        for line in reversed(text.splitlines()):
            head = line.split(":", 1)[0].strip()
            if head.endswith(("Error", "Exception")) and " " not in head:
                return line.strip()
    return f"{type(error).__name__}: {text}"


def _relative(path: Path, base: Path | None) -> str:
    """`path` relative to the course root where it lies inside it, else absolute."""
    if base is None:
        return str(path)
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)
