"""Plugins outside pytest's and the course's that hook a run's test reports.

A plugin can turn every report into a pass: a `pytest_runtest_makereport` wrapper that sets
`report.outcome = "passed"`, a `pytest_pyfunc_call` that never calls the test, a
`pytest_report_teststatus` that prints PASSED. It can arrive from PYTEST_PLUGINS (no file in
the checkout), `-p`, or a conftest.py. A run where one is registered counts nothing as done:
its progress is recorded as such, naming the plugin (docs/earned.md).

Allowed: pytest's and pluggy's own modules, the course's package, a few plugins that hook
reports or calls for their own bookkeeping (pytest-xdist, pytest-benchmark, hypothesis, anyio,
pytest-asyncio, pytest-cov, pytest-timeout), and the
course's conftest files as shipped (shipped.json, learner/shipped.py).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

# Hooks through which a plugin decides or changes a test's outcome, whether it runs at all, or
# which of a graded file's tests are collected (dropping the one that fails).
REPORT_HOOKS = ("pytest_runtest_protocol", "pytest_runtest_makereport", "pytest_report_teststatus",
                "pytest_runtest_logreport", "pytest_runtest_call", "pytest_pyfunc_call",
                "pytest_report_from_serializable", "pytest_runtest_setup", "pytest_fixture_setup",
                "pytest_collection_modifyitems", "pytest_itemcollected", "pytest_pycollect_makeitem",
                "pytest_collect_file", "pytest_collection")
# The course's fixtures a graded test takes: one defined again elsewhere (a conftest's `impl`
# returning the shipped solution) grades something else than the learner's tree.
COURSE_FIXTURES = ("impl", "gate_run", "mesh", "roofline_prediction")
ALLOWED_PACKAGES = ("_pytest", "pytest", "pluggy", "pytest_tpucourse",
                    # plugins that hook reports or calls for their own bookkeeping, never an outcome
                    "xdist", "pytest_benchmark", "hypothesis", "_hypothesis_pytestplugin", "anyio",
                    "pytest_asyncio", "pytest_cov", "pytest_timeout")


def foreign_report_hooks(pluginmanager, shipped_file=lambda path: False) -> list[str]:
    """'<file>: <hook>' of each hook implementation outside the allowed modules.

    shipped_file(path): whether a conftest.py at `path` is one of the course's as shipped.
    """
    found = []
    for hook in REPORT_HOOKS:
        caller = getattr(pluginmanager.hook, hook, None)
        if caller is None:
            continue
        for impl in caller.get_hookimpls():
            origin = _origin(impl.function)
            if origin is None or _allowed(origin, shipped_file):
                continue
            found.append(f"{origin}: {hook}")
    return sorted(set(found))


def foreign_fixtures(items, shipped_file=lambda path: False) -> list[str]:
    """'<file>: fixture <name>' of each course fixture the graded `items` take from a definition
    outside the allowed modules (pytest's fixture resolution, read once after collection)."""
    found = set()
    for item in items:
        definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", None) or {}
        for name in COURSE_FIXTURES:
            chain = definitions.get(name) or ()
            if not chain:
                continue
            function = getattr(chain[-1], "func", None)  # the definition closest to the test wins
            origin = _origin(function) if function is not None else None
            if origin is None or not _allowed(origin, shipped_file):
                found.add(f"{origin or 'an unknown file'}: fixture {name}")
    return sorted(found)


def _origin(function) -> str | None:
    try:
        return inspect.getsourcefile(function) or inspect.getfile(function)
    except TypeError:
        return None


def _allowed(origin: str, shipped_file) -> bool:
    """The hook's code lies in the files of an allowed package as loaded (its module name is not
    enough: pytest-xdist's worker runs `xdist/remote.py` under execnet's own module name)."""
    where = Path(origin).resolve()
    for name in ALLOWED_PACKAGES:
        package = sys.modules.get(name)
        if package is None or not getattr(package, "__file__", None):
            continue
        folder = Path(package.__file__).resolve()
        if getattr(package, "__path__", None) is not None:  # a package: its folder
            folder = folder.parent
        if where == folder or folder in where.parents:
            return True
    return Path(origin).name == "conftest.py" and shipped_file(Path(origin))
