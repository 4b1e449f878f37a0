"""A traced program's whole structure as one hashable key: exact, or none at all.

Two imports of the same learner module give two function objects, and JAX's caches, which key
a trace by the function object, see two programs. `structure_key` says when two traces are one
program: every equation's primitive and parameters, sub-programs included (a pallas_call's kernel
body, its grid and BlockSpecs with their index maps, its compiler and interpret parameters),
every variable's type and place, every constant's value. A value of a kind this module does not
know how to key in full (a function among the parameters, an object of an unknown class) makes
the key None: two programs are never called the same on a guess. Source locations are left out;
the callers key the module's source text alongside (grading/compiled.py).

A jaxpr's printed text is not such a key: it leaves out a BlockSpec's index map, among others.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import types

import numpy as np

_PLAIN = (type(None), bool, int, float, complex, str, bytes)


class _Unkeyable(Exception):
    """A value whose whole meaning this module cannot key."""


def structure_key(closed_jaxpr) -> str | None:
    """A digest of the program's whole structure (a ClosedJaxpr or a Jaxpr), or None where some
    part of it cannot be keyed in full."""
    try:
        parts: list = []
        _Walk(parts).value(closed_jaxpr)
    except (_Unkeyable, RecursionError):
        return None
    return hashlib.sha256(repr(parts).encode()).hexdigest()


class _Walk:
    def __init__(self, parts: list):
        self.parts = parts
        self.names: dict = {}  # id(Var) -> its number, in order of first sight (names are not structure)
        self.held: list = []  # the variables numbered, kept alive so no id is reused during the walk
        self.numbering = True  # False in an effect: a variable it names must have been seen

    def value(self, value) -> None:
        from jax.extend import core

        out = self.parts.append
        if isinstance(value, _PLAIN):
            out((type(value).__name__, repr(value)))
        elif isinstance(value, core.ClosedJaxpr):
            out("closed")
            self.jaxpr(value.jaxpr)
            out(("consts", len(value.consts)))
            for const in value.consts:
                self.value(const)
        elif isinstance(value, core.Jaxpr):
            self.jaxpr(value)
        elif isinstance(value, core.Literal):
            out("literal")
            self.value(value.val)
            self.aval(value.aval)
        elif isinstance(value, core.Var):
            self.var(value)
        elif isinstance(value, (np.ndarray, np.generic)) or _is_jax_array(value):
            array = np.asarray(value)
            out(("array", array.shape, str(array.dtype), hashlib.sha256(array.tobytes()).hexdigest()))
        elif isinstance(value, np.dtype):
            out(("dtype", str(value)))
        elif isinstance(value, type) and issubclass(value, np.generic):
            out(("dtype", np.dtype(value).name))
        elif isinstance(value, enum.Enum):
            out(("enum", _qualified(type(value)), value.name))
        elif isinstance(value, (tuple, list)):
            out((_qualified(type(value)), len(value)))
            for item in value:
                self.value(item)
        elif isinstance(value, dict):
            out(("dict", len(value)))
            for key in sorted(value, key=repr):
                self.value(key)
                self.value(value[key])
        elif isinstance(value, (set, frozenset)):
            out(("set", sorted(repr(item) for item in value if isinstance(item, _PLAIN))))
            if not all(isinstance(item, _PLAIN) for item in value):
                raise _Unkeyable(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out(("dataclass", _qualified(type(value))))
            for field in dataclasses.fields(value):
                out(field.name)
                self.value(getattr(value, field.name))
        elif _is_aval(value):
            self.aval(value)
        elif _is_treedef(value):
            out(("tree", str(value)))
        elif _keyed_by_repr(value):
            out((_qualified(type(value)), repr(value)))
        else:
            raise _Unkeyable(value)

    def jaxpr(self, jaxpr) -> None:
        out = self.parts.append
        out(("jaxpr", len(jaxpr.constvars), len(jaxpr.invars), len(jaxpr.eqns)))
        for var in (*jaxpr.constvars, *jaxpr.invars):
            self.var(var)
        for eqn in jaxpr.eqns:
            out(("eqn", eqn.primitive.name, len(eqn.invars), len(eqn.outvars)))
            for var in eqn.invars:
                self.value(var)
            for name in sorted(eqn.params):
                out(name)
                self.value(eqn.params[name])
            for var in eqn.outvars:
                self.var(var)
            self.effects(eqn.effects)
        out(("out", len(jaxpr.outvars)))
        for var in jaxpr.outvars:
            self.value(var)
        self.effects(jaxpr.effects)

    def var(self, var) -> None:
        from jax.extend import core

        if isinstance(var, core.Literal):
            self.value(var)
            return
        if isinstance(var, core.DropVar):
            self.parts.append("drop")
        else:
            if id(var) not in self.names:
                if not self.numbering:
                    raise _Unkeyable(var)
                self.names[id(var)] = len(self.names)
                self.held.append(var)
            self.parts.append(("var", self.names[id(var)]))
        self.aval(var.aval)

    def aval(self, aval) -> None:
        self.parts.append(("aval", _qualified(type(aval)), repr(aval), str(aval)))

    def effects(self, effects) -> None:
        named = []
        for effect in effects:  # a set: each keyed apart, then sorted
            walk = _Walk([])
            walk.names, walk.held, walk.numbering = self.names, self.held, False
            walk.effect(effect)
            named.append(repr(walk.parts))
        self.parts.append(("effects", sorted(named)))

    def effect(self, effect) -> None:
        self.parts.append(("effect", _qualified(type(effect))))
        fields = getattr(effect, "__dict__", {})
        if fields and set(fields) <= {"input", "input_index"}:  # a Ref's read or write: the input it touches
            for name in sorted(fields):
                self.value(fields[name])
        elif dataclasses.is_dataclass(effect):
            self.value(effect)
        elif fields or getattr(type(effect), "__slots__", None):
            raise _Unkeyable(effect)  # state of its own this module does not know


def _qualified(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_jax_array(value) -> bool:
    import jax

    return isinstance(value, jax.Array)


def _is_aval(value) -> bool:
    from jax import core

    return isinstance(value, core.AbstractValue)


def _is_treedef(value) -> bool:
    import jax

    return isinstance(value, jax.tree_util.PyTreeDef)


def _keyed_by_repr(value) -> bool:
    """Values whose repr says all of what they are: shardings, meshes, partition specs, a dot's
    precision, plain namespaces."""
    import jax
    from jax import lax

    kinds = (jax.sharding.Sharding, jax.sharding.PartitionSpec, jax.sharding.Mesh, lax.Precision,
             types.SimpleNamespace)
    abstract_mesh = getattr(jax.sharding, "AbstractMesh", None)
    if abstract_mesh is not None:
        kinds = (*kinds, abstract_mesh)
    return isinstance(value, kinds)
