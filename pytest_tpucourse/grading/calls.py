"""The one way a graded test calls the code it grades.

Every call into learner code goes through `LearnerFunction` (a `GradedFunction`),
which waits for the result within the deadline, refuses a VMEM request the chip
cannot hold, and turns what can go wrong into a short outcome naming the function
and the file to edit.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..course import Exercise
from ..outcomes import LearnerCodeError, Todo
from . import backend
from .compiled import call_key, compiled_or_eager
from .context import GradingContext, active
from .deadline import DeadlineExceeded
from .messages import deadline_message, describe_exception, raised_in, relative
from .vmem import ScratchTooLarge

if TYPE_CHECKING:
    from .tree import LearnerModule


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
        import jax

        function, context = self.resolve(), self.context

        def run():
            context.vmem.check(function, args, kwargs)
            return jax.block_until_ready(compiled_or_eager(
                lambda: context.programs.get(function, kwargs, "call")(*args),
                lambda: function(*args, **kwargs), args))

        with self._guarded():
            return context.deadline.call(run, key=call_key(function, args, kwargs, exact=True))

    def jaxpr(self, *args, **kwargs):
        """The closed jaxpr of a call with these arguments (kwargs are static)."""
        import jax

        function = self.resolve()
        with self._guarded():
            return self.context.deadline.call(
                lambda: jax.make_jaxpr(lambda *a: function(*a, **kwargs))(*args))

    def vjp(self, args, cotangents, **kwargs):
        """(outputs, grads of every arg) for output cotangents, through the function's own VJP."""
        import jax

        function, context = self.resolve(), self.context

        def run():
            context.vmem.check(function, args, kwargs)

            def eager():
                outputs, pullback = jax.vjp(lambda *a: function(*a, **kwargs), *args)
                return outputs, pullback(cotangents)

            return jax.block_until_ready(compiled_or_eager(
                lambda: context.programs.get(function, kwargs, "vjp")(tuple(args), cotangents),
                eager, args))

        with self._guarded():
            return context.deadline.call(run)

    @contextlib.contextmanager
    def _guarded(self):
        try:
            with backend.quiet_callback_errors():
                yield
        except Exception as error:
            backend.reset_after_failure()
            raise self._outcome(error) from None

    def _outcome(self, error: Exception) -> Exception:
        if isinstance(error, DeadlineExceeded):
            return LearnerCodeError(deadline_message(self.display, error))
        if isinstance(error, ScratchTooLarge):
            return LearnerCodeError(f"{self.display} {error}; nothing was run.")
        return LearnerCodeError(
            f"{self.display} raised:\n" + describe_exception(error, self._path, self._course_root)
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


class LearnerFunction(GradedFunction):
    """A function in the graded tree: imported on first use; a stub is TODO.

    A NotImplementedError raised from the learner's own file means the stub is
    still there (Todo); raised anywhere else it is an ordinary failure.
    """

    def __init__(self, module: LearnerModule, name: str, exercise: Exercise | None):
        super().__init__(None, "", module.path, module.course_root, module._context)
        self.module = module
        self.name = name
        self.exercise = exercise

    @property
    def path(self) -> Path:
        return self.module.path

    @property
    def display(self) -> str:
        return f"{self.name}() in {relative(self.path, self.module.course_root)}"

    def resolve(self):
        module = self.module.load()
        function = getattr(module, self.name, None)
        if not callable(function):
            raise LearnerCodeError(
                f"{relative(self.path, self.module.course_root)} has no function {self.name}(); "
                f"the graded tests call {self.module._name}.{self.name}(...)."
            )
        return function

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
