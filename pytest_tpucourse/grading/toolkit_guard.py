"""The course's checks as the run started them: graded code cannot disarm them.

Graded code runs in the grader's process and can reach its modules: a learner's module that
does `checks._assert_close = lambda *a, **k: None` at import, or replaces
`gates.run._wrong_output`, would make every comparison pass. Two defences:

* Bound at the session's start, before any graded import: the functions of the checker
  (checks.py) and of the gate runner (gates/run.py and the modules it measures with), methods
  of their classes included, look names up in a private copy of their module's namespace, so
  replacing a module attribute does not change what they call.
* Watched: every attribute of the course's loaded modules (at the session's start, then at
  collection's end, before any graded code runs) is compared after each test with what it
  was; a replaced one (or a constant table edited in place) fails the test that changed it
  and is put back for the tests that follow.

Code in the same process can always lie further (a function's `__globals__`, the bytecode
itself): docs/earned.md says what this protects against and what only a trusted re-run can.
"""

from __future__ import annotations

import dis
import importlib
import sys
import types

PACKAGE = "pytest_tpucourse"
BOUND = (f"{PACKAGE}.checks", f"{PACKAGE}.gates.run", f"{PACKAGE}.gates.floor", f"{PACKAGE}.gates.trio",
         f"{PACKAGE}.gates.multi_chip", f"{PACKAGE}.gates.ceiling_sweep", f"{PACKAGE}.gates.sampling",
         f"{PACKAGE}.gates.results")
_TABLE_ITEMS = 256  # an upper-case table at most this long is compared by value too


class ToolkitGuard:
    def __init__(self):
        self._snapshots: dict[str, tuple[types.ModuleType, dict, dict]] = {}
        self._own: dict[str, set[str]] = {}  # module name -> the names its own functions assign

    def bind(self, names=BOUND) -> None:
        """Import and bind the checker's modules, then watch everything loaded so far."""
        for name in names:
            _bind(importlib.import_module(name))
        self.watch_loaded()

    def watch_loaded(self) -> None:
        """Watch the course's modules loaded since the last call, as they are now."""
        for name, module in list(sys.modules.items()):
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and name not in self._snapshots \
                    and isinstance(module, types.ModuleType):
                own = self._own[name] = _assigned_by_itself(module)
                attributes = {k: v for k, v in vars(module).items() if k not in own and not k.startswith("__")}
                tables = {k: repr(v) for k, v in attributes.items() if _is_table(k, v)}
                self._snapshots[name] = (module, attributes, tables)

    def restore_changed(self) -> list[str]:
        """The watched attributes that changed ("checks._assert_close"), each put back."""
        changed = []
        for name, (module, attributes, tables) in self._snapshots.items():
            namespace = vars(module)
            short = name.removeprefix(PACKAGE + ".")
            for key, value in attributes.items():
                if namespace.get(key, _MISSING) is not value:
                    changed.append(f"{short}.{key}")
                    namespace[key] = value
                elif key in tables and _safe_repr(value) != tables[key]:
                    changed.append(f"{short}.{key} (edited in place)")
            for key in [k for k in namespace if k not in attributes and not k.startswith("__")
                        and _shadows_a_builtin(k) and k not in self._own[name]]:
                changed.append(f"{short}.{key}")
                del namespace[key]
        return changed


_MISSING = object()


def _bind(module: types.ModuleType) -> None:
    """Give the module's functions (and its classes' methods) a private copy of its namespace."""
    namespace = vars(module)
    private = dict(namespace)

    def rebound(function):
        if not isinstance(function, types.FunctionType) or function.__globals__ is not namespace:
            return function
        copy = types.FunctionType(function.__code__, private, function.__name__, function.__defaults__,
                                  function.__closure__)
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__dict__.update(function.__dict__)
        copy.__qualname__, copy.__doc__ = function.__qualname__, function.__doc__
        copy.__annotations__, copy.__module__ = function.__annotations__, function.__module__
        return copy

    for key, value in list(namespace.items()):
        if isinstance(value, types.FunctionType):
            private[key] = namespace[key] = rebound(value)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, member in list(vars(value).items()):
                if isinstance(member, types.FunctionType):
                    setattr(value, attr, rebound(member))
                elif isinstance(member, (staticmethod, classmethod)):
                    setattr(value, attr, type(member)(rebound(member.__func__)))
                elif isinstance(member, property):
                    setattr(value, attr, property(rebound(member.fget), rebound(member.fset),
                                                  rebound(member.fdel), member.__doc__))


def _assigned_by_itself(module: types.ModuleType) -> set[str]:
    """Names the module's own functions assign (`global x; x = ...`): its state, not its code."""
    found: set[str] = set()
    for value in list(vars(module).values()):
        functions = [value] if isinstance(value, types.FunctionType) else (
            [m for m in vars(value).values() if isinstance(m, types.FunctionType)]
            if isinstance(value, type) and value.__module__ == module.__name__ else [])
        for function in functions:
            if function.__module__ == module.__name__:
                found |= _stored_globals(function.__code__)
    return found


_STORES = frozenset({dis.opmap["STORE_GLOBAL"], dis.opmap["DELETE_GLOBAL"]})
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


def _stored_globals(code: types.CodeType) -> set[str]:
    """The global names a code object (and the code nested in it) stores or deletes. Reads the
    bytecode's (opcode, argument) pairs directly: dis.get_instructions, per instruction in Python,
    made the snapshots of the course's modules cost a tenth of a second per run."""
    names: set[str] = set()
    raw = code.co_code
    if not _STORES.isdisjoint(raw[::2]):
        extended = 0
        for index in range(0, len(raw), 2):
            op, arg = raw[index], raw[index + 1] | extended
            extended = arg << 8 if op == _EXTENDED_ARG else 0
            if op in _STORES:
                names.add(code.co_names[arg])
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _stored_globals(const)
    return names


def _is_table(key: str, value) -> bool:
    return (key.lstrip("_").isupper() and isinstance(value, (dict, list, set))
            and len(value) <= _TABLE_ITEMS)


def _safe_repr(value) -> str | None:
    try:
        return repr(value)
    except Exception:
        return None


def _shadows_a_builtin(key: str) -> bool:
    """A new module attribute named like a builtin (`len`, `abs`) changes what its code calls."""
    import builtins

    return hasattr(builtins, key)
