"""The call a value check judged, made again: under another interpret setting, on other
inputs, or as its traced program.

A check that fails keeps a Replay of the call (the graded function, its arguments, the
cotangents of a VJP, which output leaf was judged, and the interpret mode in effect), and
the diagnosis runs it again to gather evidence. Every run goes through the graded
function's deadline, so a hang stops as a graded call's would, and a kernel that fails
here leaves no simulated state behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from dataclasses import dataclass, field

import numpy as np

from ..core import jax_internals
from ..grading import backend


class ReplayFailed(Exception):
    """The call, made again, did not give a result (it raised, or hung)."""


@dataclass
class Replay:
    fn: object  # the GradedFunction judged
    kind: str  # "call": fn(*args, **kwargs); "vjp": the grads of fn for `cotangents`
    args: tuple
    kwargs: dict = field(default_factory=dict)
    cotangents: object = None
    leaf: int = 0  # the position of the judged array among the result's leaves
    interpret: object = None  # the Pallas TPU interpret mode in effect when the check failed
    printed: str = ""  # what the interpreter printed during the latest run
    device: int | None = None  # a multi-device result: the device whose buffer was judged

    shape: tuple | None = None  # leaf -1: the judged array is the result's first leaf of this shape

    def on_device(self, device: int) -> "Replay":
        """The same call, judged on one device's buffer of its result."""
        return dataclasses.replace(self, device=device)

    @classmethod
    def of_call(cls, fn, args, kwargs=None, leaf: int = 0, shape: tuple | None = None) -> "Replay":
        return cls(fn, "call", tuple(args), dict(kwargs or {}), leaf=leaf,
                   interpret=jax_internals.interpret_mode_in_effect(), shape=shape)

    @classmethod
    def of_vjp(cls, fn, args, cotangents, kwargs=None, leaf: int = 0) -> "Replay":
        return cls(fn, "vjp", tuple(args), dict(kwargs or {}), cotangents, leaf,
                   jax_internals.interpret_mode_in_effect())

    @property
    def tpu_interpret(self) -> bool:
        """Kernels ran under TPU interpret mode (which can be asked to poison memory otherwise)."""
        return type(self.interpret).__name__ == "InterpretParams"

    def _target(self):
        function, kwargs = self.fn.resolve(), self.kwargs
        if self.kind == "call":
            return lambda *args: function(*args, **kwargs), self.args
        import jax

        def grads(args, cotangents):
            return jax.vjp(lambda *a: function(*a, **kwargs), *args)[1](cotangents)
        return grads, (self.args, self.cotangents)

    def program(self):
        """(the traced program, its flat arguments): the call's jaxpr, or its VJP's."""
        import jax

        target, args = self._target()
        closed = self.fn.context.deadline.call(lambda: jax.make_jaxpr(target)(*args))
        return closed, jax.tree.leaves(args)

    def run(self, **setting) -> np.ndarray:
        """The judged leaf of the call made again, under the interpret mode of the failed check
        with `setting`'s fields changed (uninitialized_memory="zero", random_seed=1, ...)."""
        return self.run_on(self.args, self.cotangents, **setting)

    def run_on(self, args, cotangents=None, **setting) -> np.ndarray:
        """The same call on other arguments (float32 copies, say)."""
        import jax
        from jax.experimental.pallas import tpu as pltpu

        function, kwargs = self.fn.resolve(), self.kwargs
        if self.kind == "call":
            def target(args, cotangents):
                return function(*args, **kwargs)
        else:
            def target(args, cotangents):
                return jax.vjp(lambda *a: function(*a, **kwargs), *args)[1](cotangents)
        if setting and not self.tpu_interpret:
            raise ReplayFailed("kernels do not run under TPU interpret mode here")
        params = dataclasses.replace(self.interpret, detect_races=False, **setting) if self.tpu_interpret else None

        def run():
            try:  # one compiled program, as graded calls run; code that cannot be traced runs eagerly
                return jax.block_until_ready(jax.jit(target)(args, cotangents))
            except Exception:
                backend.reset_after_failure()
                return jax.block_until_ready(target(args, cotangents))

        printed = io.StringIO()
        try:
            with backend.quiet_callback_errors(), contextlib.redirect_stdout(printed):
                if params is None:
                    out = self.fn.context.deadline.call(run)
                else:
                    with pltpu.force_tpu_interpret_mode(params):
                        out = self.fn.context.deadline.call(run)
        except Exception as error:
            backend.reset_after_failure()
            raise ReplayFailed(f"{type(error).__name__}: {error}") from None
        finally:
            self.printed = printed.getvalue()  # what the interpreter printed (semaphores left counting)
        leaves = jax.tree.leaves(out)
        leaf = (leaves[self.leaf] if self.leaf >= 0 else
                next((x for x in leaves if tuple(getattr(x, "shape", ())) == self.shape), None))
        if leaf is None:
            raise ReplayFailed(f"no result of shape {self.shape}")
        if self.device is not None:
            leaf = next(s.data for s in leaf.addressable_shards if s.device.id == self.device)
        return np.asarray(leaf).astype(np.float64)

    def with_float32_inputs(self):
        """(args, cotangents) with every bfloat16 or float16 array as a float32 copy: the same values."""
        import jax
        import jax.numpy as jnp

        def widen(x):
            return x.astype(jnp.float32) if hasattr(x, "dtype") and x.dtype in (jnp.bfloat16, jnp.float16) else x
        return jax.tree.map(widen, self.args), jax.tree.map(widen, self.cotangents)
