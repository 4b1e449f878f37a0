"""The one way a graded test calls the code it grades.

Every call into learner code goes through `LearnerFunction` (a `GradedFunction`),
which waits for the result within the deadline, refuses a VMEM request the chip
cannot hold and a product the chip would refuse or compute too coarsely, and turns
what can go wrong into a short outcome naming the function and the file to edit.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import pytest

from ..core.course import SOLUTIONS, Exercise
from ..core.outcomes import LearnerCodeError, Todo
from . import backend, unit_files
from ..readers.reproduction import last_call, remember, reproduction
from .compiled import compiled_or_eager
from . import chip_products
from .chip_products import ChipRefusesProduct
from .context import GradingContext, active, float32_bound, graded_precision
from .deadline import DeadlineExceeded
from .messages import (
    deadline_message,
    describe_exception,
    exception_headline,
    out_of_bounds_detail,
    raised_in,
)
from ..core.paths import shown
from .solution_code import Provenance, read_verdict, shipped_solution_in
from .vmem import ScratchTooLarge


# What pytest.skip(), pytest.fail(), pytest.xfail() and pytest.importorskip() raise: BaseExceptions,
# which graded code must not use to end its own test (a skip would count as finished).
PYTEST_OUTCOMES = (pytest.skip.Exception, pytest.fail.Exception)
_PACKAGE = Path(__file__).resolve().parents[1]


def raised_by_the_course(error: BaseException, graded_folder: Path | None = None) -> bool:
    """Whether a pytest outcome was raised by the course's own code (the plugin's skips: no
    libtpu, too few devices), not by code under grading. A course function that skips, called
    from a file of `graded_folder` (graded code calling `libtpu.skip_unless_available()`), is
    the graded code's skip."""
    tb, caller = error.__traceback__, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if graded_folder is not None and _inside(Path(filename), graded_folder):
            return False
        if not tb.tb_frame.f_globals.get("__tracebackhide__") and not tb.tb_frame.f_locals.get("__tracebackhide__"):
            caller = filename
        tb = tb.tb_next
    return caller is not None and _inside(Path(caller), _PACKAGE)


def pytest_outcome_message(display: str, error: BaseException, path: Path | None,
                           course_root: Path | None) -> str:
    """A pytest.skip() (fail, xfail) from graded code, as the failure it is."""
    kind = {"Skipped": "pytest.skip()", "XFailed": "pytest.xfail()", "Failed": "pytest.fail()"}.get(
        type(error).__name__, f"pytest's {type(error).__name__}")
    reason = str(getattr(error, "msg", "") or error).strip()
    where = next((f" at {shown(Path(f.filename), course_root)}:{f.lineno}" for f in _frames(error)
                  if path is not None and Path(f.filename).resolve() == Path(path).resolve()), "")
    return (f"{display} called {kind}{where}" + (f" ({reason})" if reason else "")
            + ": graded code cannot skip, fail or xfail its own tests, so the test fails instead.")


def _frames(error: BaseException):
    import traceback

    return traceback.extract_tb(error.__traceback__)


class GradedFunction:
    """Any callable under grading, called the way a graded test needs.

    Every call waits for its result, so an error inside an asynchronously
    dispatched kernel is charged to the function, not to the checker, and turns
    an exception into a short LearnerCodeError. Graded tests meet it as a
    LearnerFunction; the project's own tests wrap JAX's shipped kernels in it to
    grade them as if a learner had written them. `context` (the run's deadline, VMEM
    budget and caches) defaults to the run in progress.
    """

    def __init__(self, function, display: str, path: Path | None = None,
                 course_root: Path | None = None, context: GradingContext | None = None):
        self._function = function
        self._display = display
        self._path = path
        self._course_root = course_root
        self._context = context

    @property
    def display(self) -> str:
        return self._display

    @property
    def context(self) -> GradingContext:
        return self._context or active()

    def resolve(self):
        return self._function

    def __call__(self, *args, **kwargs):
        function, context = self.resolve(), self.context
        remember(self, "call", args, kwargs)

        def check(closed=None):
            self._check_program(function, args, kwargs, closed)

        def eager():
            check()
            return function(*args, **kwargs)

        with self._guarded(), graded_precision(args):
            return self._run(lambda: context.programs.get(function, kwargs, "call"), args, eager,
                             check=check, function=function, replay=(kwargs, "call"))

    def jaxpr(self, *args, **kwargs):
        """The closed jaxpr of a call with these arguments (kwargs are static)."""
        import jax

        function = self.resolve()
        remember(self, "call", args, kwargs)
        with self._guarded():
            return self.context.deadline.call(
                lambda: jax.make_jaxpr(lambda *a: function(*a, **kwargs))(*args))

    def program_jaxpr(self, *args, **kwargs):
        """The closed jaxpr of a call as the call's own program traces it: jit's trace, which the
        call then reuses, so the learner's Python runs once for both (and not at all where the
        program was compiled ahead, ahead.py). Arguments that are not all arrays (the call runs
        them eagerly): jaxpr(). Shapes (jax.ShapeDtypeStruct) trace as the arrays they stand for."""
        import jax

        if not all(isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)) for leaf in jax.tree.leaves(args)):
            return self.jaxpr(*args, **kwargs)
        function, context = self.resolve(), self.context
        remember(self, "call", args, kwargs)
        program = context.programs.get(function, kwargs, "call")
        bound = program.keywords if isinstance(program, functools.partial) else {}
        program = program.func if isinstance(program, functools.partial) else program
        with self._guarded(), graded_precision(args):  # as the call traces it
            self._await_ahead(program, args, bound, None)
            return context.deadline.call(lambda: program.trace(args, bound).jaxpr)

    def vjp(self, args, cotangents, **kwargs):
        """(outputs, grads of every arg) for output cotangents, through the function's own VJP."""
        import jax

        function, context = self.resolve(), self.context
        remember(self, "vjp", args, kwargs)

        def check(closed=None):
            self._check_program(function, args, kwargs, closed)

        def eager():
            check()
            outputs, pullback = jax.vjp(lambda *a: function(*a, **kwargs), *args)
            return outputs, pullback(cotangents)

        with self._guarded(), graded_precision(args):
            return self._run(lambda: context.programs.get(function, kwargs, "vjp"), (tuple(args), cotangents),
                             eager, check=check, function=function, replay=(kwargs, "vjp"))

    def _check_program(self, function, args, kwargs, closed=None) -> None:
        """What a call's program must pass before it runs: its VMEM scratch fits the chip (vmem.py),
        and, where no TPU runs it natively to say so itself, its products are ones the chip compiles
        and computes as finely as the call is graded (chip_products.py). closed: the program as the
        call traced it (its jaxpr), or None (read here, at most once per call signature)."""
        context = self.context
        read = context.vmem.check(function, args, kwargs, closed)
        closed = closed if closed is not None else read
        if closed is not None and not context.native_tpu:
            chip_products.check(closed, f32_bound=float32_bound(args), chip_name=context.kernel_chip().name,
                                show_path=lambda path: shown(Path(path), self._course_root))

    def program_origin(self) -> tuple | None:
        """(the module's resolved file, the digest of the source this run imported it from): where
        the programs of the function's calls come from, so one compiled from another import of
        the same source may stand in (compiled.program_identity). None: not a graded module's."""
        return None

    @property
    def replay_source(self) -> tuple | None:
        """Where a later run finds this function to compile its calls ahead (ahead.py): its module's
        file, the graded tree's root, the chapter and the module's name. None: a function that is
        not a module's of the graded tree."""
        return None

    def _run(self, program, call_args, eager, *, check, function, replay=None):
        """The call within the deadline: its program compiled first, outside the deadline.

        Tracing runs the learner's Python (a loop in it must meet the deadline, and so must
        the VMEM check, which traces too); lowering and compiling are JAX's and XLA's work,
        slow under load or for a big program, and are never counted as the call's time.
        Arguments that are not all jax.Arrays, and a program that fails to trace or compile,
        run eagerly, where the learner's error shows as their code raised it.
        """
        import jax

        deadline, key = self.context.deadline, self._hang_key(function)
        compiled = self._compiled_ahead(program, call_args, check, key)
        ahead = self.context.ahead
        if compiled is not None and ahead is not None and replay is not None:
            ahead.remember(self, replay[0], replay[1], call_args)
        if compiled is None:
            return deadline.call(lambda: jax.block_until_ready(eager()), key=key)
        return deadline.call(lambda: jax.block_until_ready(
            compiled_or_eager(compiled, deadline.unless_stopped(eager), call_args)), key=key)

    def _compiled_ahead(self, program, call_args, check, key):
        """A thunk running the compiled program, or None where the call must run eagerly."""
        import jax

        if not all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(call_args)):
            return None
        compiled = program()  # a Program, or a partial of one binding traced keyword arguments
        bound = compiled.keywords if isinstance(compiled, functools.partial) else {}
        compiled = compiled.func if isinstance(compiled, functools.partial) else compiled
        self._await_ahead(compiled, call_args, bound, key)

        def trace():
            executable = compiled.cached(call_args, bound)
            if executable is not None:  # checked when it was traced
                return executable
            traced = compiled.trace(call_args, bound)
            check(traced.jaxpr)  # before anything is compiled or allocated
            return traced

        try:
            traced = self.context.deadline.call(trace, key=key)
        except (DeadlineExceeded, ScratchTooLarge, ChipRefusesProduct):
            raise
        except Exception:
            return None
        try:
            executable = (traced if isinstance(traced, jax.stages.Compiled)
                          else compiled.compile_trace(traced, call_args, bound, self.program_origin()))
        except Exception:
            return None
        return lambda: executable(*call_args, **bound)

    def _await_ahead(self, program, call_args, bound, key) -> None:
        """Where the program is being compiled ahead (ahead.py), wait for it: its trace within the
        deadline, and the files of the tree that trace ran counted in this call's unit."""
        ahead = self.context.ahead
        if ahead is not None:
            unit_files.seen_elsewhere(ahead.await_program(program, call_args, bound, self.context.deadline, key))

    def _hang_key(self, function):
        """What a hang is remembered by: the graded function (its later calls fail at once)."""
        try:
            hash(function)
        except TypeError:
            return None
        return function

    @contextlib.contextmanager
    def _guarded(self):
        try:
            with backend.quiet_callback_errors():
                yield
        except PYTEST_OUTCOMES as error:
            if raised_by_the_course(error, Path(self._path).resolve().parent if self._path else None):
                raise
            backend.reset_after_failure()
            raise LearnerCodeError(pytest_outcome_message(self.display, error, self._path, self._course_root)
                                   + reproduction(self)) from None
        except Exception as error:
            backend.reset_after_failure()
            raise self._outcome(error) from None
        self._after_call()

    def _after_call(self) -> None:
        """What a call's result must still pass before it is handed to the test (nothing here)."""

    def _outcome(self, error: Exception) -> Exception:
        again = reproduction(self)
        if isinstance(error, DeadlineExceeded):
            return LearnerCodeError(deadline_message(self.display, error) + again)
        if isinstance(error, ScratchTooLarge):
            return LearnerCodeError(f"{self.display} {error}; nothing was run." + again)
        if isinstance(error, ChipRefusesProduct):
            return LearnerCodeError(f"{self.display} {error}" + again)
        described = describe_exception(error, self._path, self._course_root)
        detail = out_of_bounds_detail(described, self._program_of_last_call(), self._course_root)
        return LearnerCodeError(
            f"{self.display} raised:\n" + described + (f"\n{detail}" if detail else "") + again,
            headline=exception_headline(self.display, error, self._path, self._course_root))

    def _program_of_last_call(self):
        """The jaxpr of the latest call, for a report that needs the kernels' BlockSpecs."""
        call = last_call(self)
        if call is None:
            return None
        try:
            import jax

            function = self.resolve()
            return self.context.deadline.call(
                lambda: jax.make_jaxpr(lambda *a: function(*a, **call.kwargs))(*call.args))
        except Exception:
            return None

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
        super().__init__(None, display, course_root=base._course_root)  # paths shown as the base's are
        self._base = base
        self._make = make
        self._made: tuple | None = None  # (base function, derived function)

    @property
    def context(self) -> GradingContext:
        return self._base.context

    def resolve(self):
        function = self._base.resolve()
        if self._made is None or self._made[0] is not function:
            self._made = (function, self._make(function))
        return self._made[1]

    def _outcome(self, error: Exception) -> Exception:
        return self._base._outcome(error)

    def _hang_key(self, function):
        return self._base._hang_key(self._base.resolve())

    def _after_call(self) -> None:
        self._base._after_call()


class LearnerFunction(GradedFunction):
    """A function in the graded tree: imported on first use; a stub is TODO.

    A NotImplementedError raised from the learner's own file means the stub is
    still there (Todo); raised anywhere else it is an ordinary failure.
    """

    def __init__(self, module, name: str, exercise: Exercise | None):
        # module: the tree.LearnerModule it belongs to (tree.py builds these; calls.py stays below it)
        super().__init__(None, "", module.path, module.course_root, module._context)
        self.module = module
        self.name = name
        self.exercise = exercise
        self._tree_files: frozenset[str] = frozenset()  # the tree's files the function runs (solution_code.py)

    @property
    def path(self) -> Path:
        return self.module.path

    @property
    def display(self) -> str:
        return f"{self.name}() in {shown(self.path, self.module.course_root)}"

    def resolve(self):
        module = self.module.load()
        function = getattr(module, self.name, None)
        if not callable(function):
            raise LearnerCodeError(
                f"{shown(self.path, self.module.course_root)} has no function {self.name}(); "
                f"the graded tests call {self.module._name}.{self.name}(...)."
            )
        self._refuse_code_from_elsewhere(function)
        ahead = self.context.ahead
        if ahead is not None:
            ahead.resolved(self, function)
        return function

    def program_origin(self) -> tuple | None:
        resolved = self.replay_source[0]  # the module's resolved file, resolved once
        digest = self.context.imported.get(resolved)
        return None if digest is None else (resolved, digest)

    @functools.cached_property
    def replay_source(self) -> tuple | None:
        module = self.module
        return str(self.path.resolve()), str(module.tree_root), module.chapter_id, module._name

    def _refuse_code_from_elsewhere(self, function) -> None:
        """The graded function must be code of the graded tree, and a learner's tree must not
        use the shipped solutions (solution_code.py): either would be marked done for code that
        is not theirs."""
        root, course_root = self.module.tree_root, self.module.course_root
        if self.module.is_learners:
            found = self._provenance(function)
            self._tree_files = found.tree_files
            self._refuse_the_shipped_solution(found.shipped)
            self._refuse_code_not_its_own(found.not_own)
        origin = defined_in(function)
        if origin is not None and not _inside(origin, root):
            raise LearnerCodeError(
                f"{self.display} is defined in {shown(origin, course_root)}, outside the graded tree "
                f"{shown(root, course_root)}/: the graded function must be written in "
                f"{shown(self.path, course_root)} itself.")

    def _provenance(self, function) -> Provenance:
        """Where the function's code comes from (solution_code.py): walked once per function object
        in a test, its reads of solutions/ asked again at every call."""
        context, course_root = self.context, self.module.course_root
        solutions_dir, reads = course_root / SOLUTIONS, context.solution_reads
        key = (id(function), str(self.path))
        walked = context.provenances.get(key)
        if walked is None or walked[0] is not function:
            found = shipped_solution_in(function, self.path, self.module.imported_source, self.module.tree_root,
                                        solutions_dir, reads, context.imported_sources)
            context.provenances[key] = (function, found)
            return found
        found = walked[1]
        if found.shipped is None and found.not_own is None and reads is not None:
            found = Provenance(read_verdict(reads, found.tree_files, course_root, solutions_dir), found.tree_files)
        return found

    @contextlib.contextmanager
    def _guarded(self):
        """The call, the files of the tree it runs counted in its module's unit (unit_files.py)."""
        with unit_files.recording(self.module.tree_root) as seen:
            try:
                with super()._guarded():
                    yield
            finally:
                if seen.files:
                    self.module.add_to_unit(seen.files)

    def _after_call(self) -> None:
        """A shipped solution read while the call ran (`runpy.run_path` inside the function) is
        refused like one read at import: the result is not the learner's."""
        reads = self.context.solution_reads
        if self.module.is_learners and reads is not None:
            course_root = self.module.course_root
            self._refuse_the_shipped_solution(read_verdict(reads, self._tree_files | {str(self.path.resolve())},
                                                           course_root, course_root / SOLUTIONS))

    def _refuse_the_shipped_solution(self, used: str | None) -> None:
        if used is not None:
            course_root = self.module.course_root
            raise LearnerCodeError(
                f"{shown(self.path, course_root)} (or a module it imports) uses the shipped solution: "
                f"it {used}. Your exercises are graded on your own code; `tpucourse solution "
                f"{self.module.chapter_id}.{self.module._name}` shows a solution once the exercise is done.",
                inputs_matter=False)

    def _refuse_code_not_its_own(self, not_own: str | None) -> None:
        if not_own is not None:
            raise LearnerCodeError(
                f"{shown(self.path, self.module.course_root)} (or a module it imports) runs code that is not "
                f"compiled from its own file: {not_own}. Your exercises are graded on the code your files "
                f"compile to.", inputs_matter=False)

    def _outcome(self, error: Exception) -> Exception:
        if isinstance(error, NotImplementedError) and raised_in(error, self.path):
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


def defined_in(function) -> Path | None:
    """The file a function's code comes from, seen through the wrappers a learner may use
    (jax.jit, jax.custom_vjp, functools.partial and wraps, a callable object); None if unknown."""
    seen = set()
    while function is not None and id(function) not in seen:
        seen.add(id(function))
        code = getattr(function, "__code__", None)
        if code is not None:
            return Path(code.co_filename)
        inner = next((getattr(function, name) for name in ("__wrapped__", "fun", "func", "__func__")
                      if getattr(function, name, None) is not None), None)
        if inner is None:
            call = getattr(type(function), "__call__", None)
            inner = call if getattr(call, "__code__", None) is not None else None
        function = inner
    return None


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return False
    return True
