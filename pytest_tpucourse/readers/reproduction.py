"""The reproduction of a failed check, written from the call itself, never typed by hand.

Every call of a graded function is remembered for the test that made it (`remember`: its
arguments and keyword arguments), and every array `strategies.random_array` builds
remembers how (`built`: shape, dtype, seed, kind). A failing check adds
`reproduction(fn, note=...)` to its message: two lines a learner pastes into Python at the
course root to make the very same call (`pytest_tpucourse.prompt` sets JAX up as a graded
run does, and loads the graded file), then the test's note for what a call cannot show
(values a test set by hand, the DMA setting a block ran under). The lines come from the
call, so they cannot drift from it.

    reproduce (python, at the course root):
      from pytest_tpucourse.prompt import *; x = random_array((256, 512), 'bfloat16', 7); y = ...
      out = load('exercises/ch11/matmul.py').matmul(x, y, bm=128, bk=256, bn=128)
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass, field

from ..core.paths import shown
from ..core.running_test import current_test

# What `from pytest_tpucourse.prompt import *` brings, and the names the pasted lines use.
PROMPT_NAMES = frozenset({"jax", "jnp", "np", "random_array", "cotangents_like", "load", "mesh",
                          "out", "f", "pullback", "grads"})
SMALL = 16  # arrays with at most this many elements are written out in full
LONGEST = 200  # longer literals (an HLO text, a long list) are named, not written out


@dataclass(frozen=True)
class Recipe:
    """How strategies.random_array built an array: the call that builds it again."""

    shape: tuple
    dtype: str
    seed: int
    kind: str = "normal"
    scale: float = 1.0
    offset: float = 0.0

    def code(self) -> str:
        extra = (f", kind={self.kind!r}" if self.kind != "normal" else "") \
            + (f", scale={self.scale!r}" if self.scale != 1.0 else "") \
            + (f", offset={self.offset!r}" if self.offset != 0.0 else "")
        return f"random_array({self.shape!r}, {self.dtype!r}, {self.seed}{extra})"


_recipes: dict[int, tuple] = {}  # id(array) -> (weak reference, Recipe)


def built(array, recipe: Recipe) -> None:
    """Remember how `array` was built (strategies.random_array calls this)."""
    key = id(array)

    def forget(reference, key=key):
        if _recipes.get(key, (None,))[0] is reference:
            del _recipes[key]

    try:
        _recipes[key] = (weakref.ref(array, forget), recipe)
    except TypeError:  # not weakly referable: not remembered
        pass


def recipe_of(value) -> Recipe | None:
    found = _recipes.get(id(value))
    return found[1] if found is not None and found[0]() is value else None


@dataclass(frozen=True)
class Call:
    kind: str  # "call" (fn(*args, **kwargs)) or "vjp" (its VJP for given cotangents)
    args: tuple
    kwargs: dict = field(default_factory=dict)
    test: str | None = None  # the node id of the test that made it


def remember(fn, kind: str, args, kwargs) -> None:
    """Remember a graded function's latest call, for the test making it."""
    fn.context.calls[fn.display] = Call(kind, tuple(args), dict(kwargs), current_test())


def last_call(fn) -> Call | None:
    """fn's latest call in the test running now, if it made one."""
    context = getattr(fn, "context", None)
    call = context.calls.get(fn.display) if context is not None else None
    return call if call is not None and call.test == current_test() else None


def of_program_check(fn, args, kwargs, note: str = "") -> str:
    """fn's reproduction for a check that reads fn's program rather than calling it."""
    remember(fn, "call", args, kwargs or {})
    return reproduction(fn, note=note)


def reproduction(fn, *, note: str = "", cotangent_seed: int | None = None) -> str:
    """What a failed check adds to its message ("" when it knows nothing to add): the lines
    that make fn's latest call again in this test, and the test's `note`."""
    call = last_call(fn) if fn is not None else None
    lines = _paste(fn, call, cotangent_seed) if call is not None else []
    if note:
        lines.append(f"  note: {note}")
    return "".join(f"\n{line}" for line in lines)


# ---------------------------------------------------------------- writing the lines


def _paste(fn, call: Call, cotangent_seed: int | None) -> list[str]:
    setup: list[str] = []
    missing: list[str] = []
    names = _argument_names(fn, len(call.args))
    args = [_expression(name, value, setup, missing) for name, value in zip(names, call.args)]
    kwargs = [f"{key}={_expression(_unique(key), value, setup, missing)}" for key, value in call.kwargs.items()]
    target = _target(fn)
    imports = "; ".join(["from pytest_tpucourse.prompt import *", *setup])
    if target is None:  # a function the test built around the graded one: the inputs, and the note
        return ["  its inputs (python, at the course root):", f"    {imports}"] \
            + ([f"    ({'; '.join(missing)})"] if missing else []) if setup else []
    if call.kind == "vjp":
        params = ", ".join(names)
        inner = ", ".join([params, *kwargs])
        seed = "" if cotangent_seed is None else f", {cotangent_seed}"
        line = (f"f = {target}; out, pullback = jax.vjp(lambda {params}: f({inner}), "
                f"{', '.join(args)}); grads = pullback(cotangents_like(out{seed}))")
    else:
        line = f"out = {target}({', '.join([*args, *kwargs])})"
    head = "  reproduce (python, at the course root):"
    if missing:
        head = "  reproduce (python, at the course root; first set what the test built itself):"
    lines = [head, f"    {imports}", f"    {line}"]
    if missing:
        lines.append(f"    ({'; '.join(missing)})")
    return lines


def _target(fn) -> str | None:
    """The expression that loads fn from its graded file, or None where fn has none."""
    path, name = getattr(fn, "path", None), getattr(fn, "name", None)
    if path is None or name is None or getattr(fn, "module", None) is None:
        return None

    return f"load({shown(path, fn.module.course_root)!r}).{name}"


def _argument_names(fn, count: int) -> list[str]:
    """The positional parameters' names in fn's own signature (arg0, arg1, ... failing that)."""
    names = []
    try:
        parameters = list(inspect.signature(fn.resolve()).parameters.values())
    except Exception:
        parameters = []
    positional = [p.name for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for index in range(count):
        name = positional[index] if index < len(positional) else f"arg{index}"
        names.append(_unique(name, names))
    return names


def _unique(name: str, taken=()) -> str:
    while name in PROMPT_NAMES or name in taken:
        name += "_"
    return name


def _expression(name: str, value, setup: list[str], missing: list[str]) -> str:
    """Python for `value`: a name bound in `setup`, a literal, or the name, listed as missing."""
    recipe = recipe_of(value)
    if recipe is not None:
        setup.append(f"{name} = {recipe.code()}")
        return name
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "ndim"):
        written = _array_literal(value)
        if written is not None:
            return written
        missing.append(f"{name}: {_dtype_name(value.dtype)}{list(value.shape)}, built by the test")
        return name
    if type(value).__name__ in ("Mesh", "AbstractMesh") and hasattr(value, "shape"):
        axes = list(value.shape.items())
        if len(axes) == 1:
            axis, size = axes[0]
            return f"mesh({size})" if axis == "x" else f"mesh({size}, {axis!r})"
    if isinstance(value, (tuple, list)):
        inner_setup, inner_missing = [], []
        items = [_expression(f"{name}{i}", item, inner_setup, inner_missing) for i, item in enumerate(value)]
        body = ", ".join(items) + ("," if isinstance(value, tuple) and len(items) == 1 else "")
        written = f"({body})" if isinstance(value, tuple) else f"[{body}]"
        if not inner_missing and len(written) <= LONGEST:
            setup.extend(inner_setup)
            return written
        missing.append(f"{name}: a {type(value).__name__} of {len(value)} the test built")
        return name
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return "{" + ", ".join(f"{k!r}: {_expression(_unique(k), v, setup, missing)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return f"float({str(value)!r})"
    if _round_trips(value):
        if len(repr(value)) <= LONGEST:
            return repr(value)
        missing.append(f"{name}: a long {type(value).__name__} the test built")
        return name
    if _is_dtype(value):
        return f"jnp.dtype({_dtype_name(value)!r})"
    missing.append(f"{name}: a {type(value).__name__} the test built")
    return name


def _array_literal(array) -> str | None:
    """A short expression building the same array, where there is one."""
    import numpy as np

    module = "np" if isinstance(array, np.ndarray) else "jnp"
    dtype = _dtype_name(array.dtype)
    shape = tuple(int(n) for n in array.shape)
    values = np.asarray(array)
    if values.size == 0:
        return f"{module}.zeros({shape!r}, {dtype!r})"
    if values.size <= SMALL:
        text = repr(values.tolist()).replace("nan", "float('nan')").replace("inf", "float('inf')")
        return f"{module}.asarray({text}, {dtype!r})"
    flat = values.reshape(-1)
    if (flat == flat[0]).all() or (np.isnan(flat).all() if flat.dtype.kind == "f" else False):
        first = flat[0].item()
        first = f"float({str(first)!r})" if isinstance(first, float) and not np.isfinite(first) else repr(first)
        return f"{module}.full({shape!r}, {first}, {dtype!r})"
    if flat.dtype.kind in "iuf" and flat.size and (flat == np.arange(flat.size)).all():
        return f"{module}.arange({flat.size}, dtype={dtype!r}).reshape({shape!r})"
    return None


def _dtype_name(dtype) -> str:
    import numpy as np

    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def _is_dtype(value) -> bool:
    import numpy as np

    if isinstance(value, np.dtype):
        return True
    if isinstance(value, type):
        try:
            np.dtype(value)
            return True
        except TypeError:
            return False
    return False


def _round_trips(value) -> bool:
    """Whether repr(value) is Python that builds an equal value (at the prompt's names)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return True
    import numpy as np

    return isinstance(value, np.generic) and not isinstance(value, np.void)
