"""The package's shape: modules, their sizes, who imports whom, and what the plugin loads.

    python bench/package_shape.py                 # the package of this checkout
    python bench/package_shape.py --root DIR      # another checkout (its pytest_tpucourse/)
    python bench/package_shape.py --importtime 5  # also: what `import pytest_tpucourse.plugin`
                                                  # loads after pytest, median of 5 interpreters

Read from the sources with `ast`, nothing is imported (except with --importtime, which
imports the plugin in child processes). An import inside a function (loaded on first
use) is listed apart from the module-level imports that run when the module loads.
Layers: a module's layer is one more than the highest layer among the package modules it
imports at module level (layer 0 imports none of them).

The rule the package keeps (LAYERS, tested by tests/test_package_shape.py): every module
belongs to one layer, and imports only modules of its own layer or of layers below it, at
load time or inside a function alike; no import circle, of either kind; and, drawn by
folder (a top-level folder with all its modules, or a top-level module), no two folders
that import each other.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = "pytest_tpucourse"
HEAVY = ("numpy", "hypothesis", "jax", "jaxlib", "ml_dtypes")

# Bottom to top. A name is a top-level module or a subpackage (all its modules).
LAYERS = (
    ("core",),                                   # the JAX shim, the course as data, outcomes, paths
    ("chips", "roofline", "references"),         # figures and oracles: pure, no machinery
    ("readers", "compiler"),                     # what a program contains; the TPU compiler
    ("strategies",),                             # inputs graded tests draw
    ("grading",),                                # how graded code is reached and run
    ("diagnosis",),                              # why a result is wrong: the failing call made again
    ("checks", "checking", "public_kernels", "prompt", "instruments", "ir", "tpu"),  # the toolkit
    ("gates", "learner", "gating", "authoring"),  # one audience each: gate rows, the learner's loop, the author
    ("run",),                                    # one pytest run, built once from the config
    ("site", "classroom", "plugin", "__init__"),  # wiring: the course site, a class graded, pytest's hooks
    ("commands",),                               # the doors: one module per `tpucourse` subcommand
)


def modules(package_dir: Path) -> dict[str, Path]:
    """{dotted name relative to the package ("grading.calls"): path}."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found[".".join(parts) or "__init__"] = path
    return found


def _resolve(current: str, is_package: bool, node: ast.ImportFrom | ast.Import, known) -> list[str]:
    """The package modules (dotted, relative to the package) an import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name.removeprefix(PACKAGE + ".") for alias in node.names
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + ".")]
    if node.level == 0:
        if node.module is None or not (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
            return []
        base = node.module.removeprefix(PACKAGE).lstrip(".")
    else:
        here = current.split(".") if current != "__init__" else []
        package = here if is_package else here[:-1]
        up = package[:len(package) - (node.level - 1)] if node.level > 1 else package
        base = ".".join(up + ([node.module] if node.module else []))
    # `from . import a` names module a; `from .a import thing` names module a.
    modules = [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
    return [m for m in modules if m in known] or [base]


def imports(known: dict[str, Path]) -> tuple[dict[str, set], dict[str, set]]:
    """({module: modules it imports when it loads}, {module: modules it imports otherwise: inside
    functions, or for type checkers only})."""
    eager, lazy = defaultdict(set), defaultdict(set)
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        top_level = set()  # imports that run when the module loads (not `if TYPE_CHECKING:` ones)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) or (
                    isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    top_level.add(id(inner))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = {t for t in _resolve(name, is_package, node, known) if t in known and t != name}
            (eager if id(node) in top_level else lazy)[name].update(targets)
    for name in known:
        lazy[name] -= eager[name]
    return eager, lazy


def layers(known, eager) -> dict[str, int]:
    level: dict[str, int] = {}

    def visit(name, stack=()):
        if name in level:
            return level[name]
        if name in stack:  # an import cycle at load time: count it as one layer
            return 0
        level[name] = 1 + max((visit(t, stack + (name,)) for t in eager[name]), default=-1)
        return level[name]

    for name in known:
        visit(name)
    return level


def layer_of(name: str) -> int | None:
    """The LAYERS index of a module (dotted, relative to the package), None where unlisted."""
    head = name.split(".")[0]
    for index, members in enumerate(LAYERS):
        if head in members:
            return index
    return None


def upward_imports(known, eager, lazy) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    found = []
    for name in known:
        for target in sorted(eager[name] | lazy[name]):
            here, there = layer_of(name), layer_of(target)
            if here is not None and there is not None and there > here:
                found.append((name, target))
    return found


def circles(known, eager, lazy) -> list[list[str]]:
    """The import circles (strongly connected groups of more than one module), every import
    counted: at load time, inside functions and for type checkers alike."""
    edges = {name: eager[name] | lazy[name] for name in known}
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(known):
        if name not in index:
            connect(name)
    return sorted(groups)


def folder_of(name: str) -> str:
    """The top-level folder a module belongs to ("readers.mosaic" -> "readers"); a top-level
    module is a folder of its own ("chips" -> "chips")."""
    return name.split(".")[0]


def folder_imports(known, eager, lazy) -> dict[str, set[str]]:
    """{folder: the other folders its modules import}, every import counted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name in known:
        for target in eager[name] | lazy[name]:
            if folder_of(target) != folder_of(name):
                graph[folder_of(name)].add(folder_of(target))
    return graph


def folder_pairs(known, eager, lazy) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Pairs of folders that import each other: (folder, folder, the module imports that make
    the pair, both ways)."""
    graph = folder_imports(known, eager, lazy)
    pairs = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if a < b and a in graph.get(b, ()):
                edges = sorted((name, target) for name in known for target in eager[name] | lazy[name]
                               if {folder_of(name), folder_of(target)} == {a, b})
                pairs.append((a, b, edges))
    return pairs


def top_level_modules(known) -> list[str]:
    """The package's own top-level .py files (its __init__.py included)."""
    return sorted(n for n, path in known.items() if "." not in n and path.name != "__init__.py"
                  or n == "__init__")


def longest_function(known) -> tuple[int, str]:
    best = (0, "")
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                best = max(best, (length, f"{name}.{node.name}"))
    return best


def plugin_load(root: Path, runs: int) -> tuple[float, list[str]]:
    """Median cumulative microseconds of `import pytest_tpucourse.plugin` after pytest (which
    pytest has loaded by the time it loads its plugins), and the heavy modules it loads."""
    times, heavy = [], []
    probe = ("import sys, pytest; import pytest_tpucourse.plugin; "
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True,
                             text=True, check=True, cwd=root)  # -c: the package in root comes first
        heavy = [m for m in out.stdout.strip().split(",") if m]
        line = [row for row in out.stderr.splitlines() if row.rstrip().endswith(f"| {PACKAGE}.plugin")][-1]
        times.append(int(line.split("|")[1]))
    return statistics.median(times), heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--importtime", type=int, default=0, metavar="RUNS")
    args = parser.parse_args()
    known = modules(args.root / PACKAGE)
    eager, lazy = imports(known)
    level = layers(known, eager)
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in known.items()}
    files = [n for n in known if n != "__init__" and not known[n].name == "__init__.py"]
    longest = max(files, key=sizes.get)
    length, function = longest_function(known)
    print(f"modules: {len(files)} (not counting __init__.py files), {sum(sizes.values())} lines")
    edges = sum(len(eager[n] | lazy[n]) for n in known)
    top = top_level_modules(known)
    print(f"top-level modules: {len(top)} ({', '.join(top)})")
    print(f"import edges: {edges} (every import, at load and inside functions)")
    found = circles(known, eager, lazy)
    print(f"import circles: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    pairs = folder_pairs(known, eager, lazy)
    print(f"folder pairs that import each other: {len(pairs)}" + "".join(
        f"\n  {a} <-> {b}: " + ", ".join(f"{x} -> {y}" for x, y in edges) for a, b, edges in pairs))
    upward = upward_imports(known, eager, lazy)
    unlisted = sorted(n for n in known if layer_of(n) is None)
    print(f"upward imports (LAYERS): {len(upward)}" + "".join(f"\n  {a} -> {b}" for a, b in upward))
    if unlisted:
        print(f"modules in no layer: {', '.join(unlisted)}")
    print(f"longest module: {longest} ({sizes[longest]} lines)")
    print(f"longest function: {function} ({length} lines)")
    print("folders (every import):" + "".join(
        f"\n  {folder} -> {', '.join(sorted(targets))}"
        for folder, targets in sorted(folder_imports(known, eager, lazy).items())))
    print("largest modules: " + ", ".join(f"{n} ({sizes[n]})" for n in sorted(files, key=sizes.get, reverse=True)[:8]))
    print("layers (module [lines]: imports at load; + imports inside functions):")
    for depth in range(max(level.values()) + 1):
        print(f"  layer {depth}")
        for name in sorted(n for n in known if level[n] == depth):
            line = f"    {name} [{sizes[name]}]"
            if eager[name]:
                line += ": " + ", ".join(sorted(eager[name]))
            if lazy[name]:
                line += " + " + ", ".join(sorted(lazy[name]))
            print(line)
    if args.importtime:
        micros, heavy = plugin_load(args.root, args.importtime)
        print(f"import {PACKAGE}.plugin after pytest: {micros / 1000:.0f} ms (median of {args.importtime}, "
              f"-X importtime cumulative); loads {', '.join(heavy) or 'none of ' + ', '.join(HEAVY)}")


if __name__ == "__main__":
    main()
