"""The edit loop as a learner lives it: one kernel file edited, then its test file run, warm.

    python bench/edit_loop.py measure --rounds 5                     # both venvs, paired
    python bench/edit_loop.py measure --pythons .venv/bin/python --edit kernel
    python bench/edit_loop.py profile --python .venv-newest/bin/python --edit comment

A copy of the course (course.toml, pyproject.toml, conftest.py, exercises/, solutions/) is made
per Python in a temporary directory and committed to a git repository of its own, as a
learner's clone is. The shipped solution of ch11.matmul is written over the stub with an edit
(a learner's own file, not the solution's bytes) and `pytest exercises/ch11/test_matmul.py` is
run twice to warm it (state, .pytest_cache, --jax-cache's folders). Then, round after round,
the file is edited again, each edit different from every earlier one, and the test file runs.

Edits (`--edit`): `comment`, a comment line moved and reworded inside the kernel's body (the
lines below it shift: the program is the same, its source locations are not); `kernel`, a
constant of the kernel's program changed (`(k + N) * 0` added to the accumulator, N new each
time: the values are the same, the program is not); `both` alternates them.

`measure`: each round, for each Python in turn (the order alternates round by round), the
edited run and a bare collection of the same file (`pytest --collect-only -q`, the order
alternating too), each a fresh `python -m pytest` process, as a learner's. Prints the medians
of wall and CPU time (user + system of the process and its children) and the median of the
per-round ratios edited run / collection: paired, on one machine, so the load moves both.

`profile`: one edited run inside an instrumented process (bench/edit_loop.py's child): where
the time goes, exclusive, in wall and CPU seconds: JAX tracing (the learner's Python among it),
lowering, XLA compiles by program (the learner's kernel, the checker's references, graded pure
JAX) and the kept programs loaded, the interpreter's host callbacks, running programs,
hypothesis' engine, the TPU compiler's child, the plugin's own checks (the shipped-solution
walk, the toolkit guard, git reads, the state file), and what is left: pytest, the plugin's
hooks and the tests' own Python. The instruments cost time of their own; the split is what
matters, `measure` gives the figures. This measures the grader on this machine, not any
kernel's speed on a TPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPIED = ("course.toml", "pyproject.toml", "conftest.py", "exercises", "solutions")
EXERCISE = "exercises/ch11/matmul.py"
SOLUTION = "solutions/ch11/matmul.py"
TEST_FILE = "exercises/ch11/test_matmul.py"
EDITS = ("comment", "kernel", "both")


# ---------------------------------------------------------------------------------- the tree

def edited(solution: str, number: int, kind: str) -> str:
    """The solution with edit `number` of `kind`: every number gives a different file."""
    if kind == "both":
        kind = EDITS[number % 2]
    lines = solution.splitlines()
    body = lines.index("def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):") + 1
    if kind == "comment":  # one to three comment lines, at the top of the body or after its first line
        where = body + number % 2
        comment = [f"    # edit {number}: the k axis carries the accumulator"] * (1 + number % 3)
        lines[where:where] = comment
    else:
        index = next(i for i, line in enumerate(lines) if line.strip().startswith("acc_ref[...] +="))
        lines[index] = lines[index] + f" + ((k + {number}) * 0).astype(jnp.float32)"
    return "\n".join(lines) + "\n"


def make_tree(directory: Path) -> Path:
    """A learner's clone of the course in `directory`: its own git repository, stubs committed."""
    directory.mkdir(parents=True)
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, directory / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, directory / name)
    git = ["git", "-c", "user.name=learner", "-c", "user.email=learner@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=directory, check=True)
    subprocess.run(["git", "add", "-A"], cwd=directory, check=True)
    subprocess.run([*git, "commit", "-qm", "the course"], cwd=directory, check=True)
    return directory


def write_edit(tree: Path, number: int, kind: str) -> None:
    solution = (REPO / SOLUTION).read_text(encoding="utf-8")
    (tree / EXERCISE).write_text(edited(solution, number, kind), encoding="utf-8")


# ---------------------------------------------------------------------------------- runs

def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _split(setup: str) -> tuple[str, str | None]:
    """A setup is a Python, or `PYTHON@ROOT`: that Python with the package of another checkout."""
    python, _, root = setup.partition("@")
    return python, root or None


WARM = {"runs": True}  # --warm: a learner's pytest (the warm process answers) or each run in its own process


def run_env(setup: str) -> dict:
    python, root = _split(setup)
    # As a learner's shell has it: no CI, and bytecode written (without it every run compiles the
    # package, the test file and its assertion rewrite again).
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "PYTHONPATH", "TPUCOURSE_WARM", "PYTHONDONTWRITEBYTECODE")}
    if root:
        env["PYTHONPATH"] = root
    if not WARM["runs"]:
        env["TPUCOURSE_WARM"] = "0"
    return env


def _warm_processes_cpu(tree: Path) -> float:
    """CPU seconds of the tree's warm process and its children so far (0 without one): a run it
    answers is its CPU, not the client's."""
    ticks, clock = 0, os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        stats[int(entry.name)] = (cmdline, int(fields[1]), sum(int(f) for f in fields[11:15]))
    roots = {pid for pid, (cmdline, _, _) in stats.items()
             if b"pytest_tpucourse.learner.warm_process" in cmdline and str(tree).encode() in cmdline}
    for pid, (_, parent, used) in stats.items():
        chain, seen = pid, set()
        while chain in stats and chain not in seen:
            if chain in roots:
                ticks += used
                break
            seen.add(chain)
            chain = stats[chain][1]
    return ticks / clock


def stop_warm_process(tree: Path) -> None:
    from pytest_tpucourse.learner import served_runs

    served_runs.stop_warm_process(tree)


def await_warm_process(tree: Path, seconds: float = 30.0) -> None:
    """Until the warm process the last run left listens (a learner's next edit comes later still)."""
    from pytest_tpucourse.learner import served_runs

    deadline = time.monotonic() + seconds
    while WARM["runs"] and time.monotonic() < deadline and not served_runs.listening(tree):
        time.sleep(0.1)


def await_idle(tree: Path, seconds: float = 15.0) -> None:
    """Until the tree's warm process has done what it does after answering a run (its checks, a
    garbage collection): off the learner's clock, but it must not slow the run measured next."""
    deadline, last = time.monotonic() + seconds, -1.0
    while time.monotonic() < deadline:
        used = _warm_processes_cpu(tree)
        if used == last:
            return
        last = used
        time.sleep(0.25)


def timed_run(setup: str, tree: Path, args: list[str], check: bool = True) -> tuple[float, float]:
    """(wall, CPU) seconds of `python -m pytest ARGS` in the tree: the CPU of the process, its
    children and the warm process that answered it."""
    python, _ = _split(setup)
    env = run_env(setup)
    cpu, start = _cpu_of_children() + _warm_processes_cpu(tree), time.perf_counter()
    result = subprocess.run([python, "-m", "pytest", *args], cwd=tree, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    await_idle(tree)
    cpu = _cpu_of_children() + _warm_processes_cpu(tree) - cpu
    if check and result.returncode != 0:
        sys.exit(f"{setup} -m pytest {' '.join(args)} failed in {tree}:\n{result.stdout[-4000:]}{result.stderr[-2000:]}")
    return elapsed, cpu


def edit_run(setup: str, tree: Path) -> tuple[float, float]:
    return timed_run(setup, tree, [TEST_FILE, "-q"])


def collection(setup: str, tree: Path) -> tuple[float, float]:
    return timed_run(setup, tree, ["--collect-only", "-q", TEST_FILE])


def version_of(setup: str) -> str:
    python, root = _split(setup)
    out = subprocess.run([python, "-c", "import sys, jax; print(sys.version.split()[0], jax.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    return f"Python {out[0]}, jax {out[1]}" + (f", the package of {root}" if root else "")


def warm(python: str, tree: Path, kind: str) -> None:
    # The first run compiles into empty folders and leaves the warm process; the second sees the
    # folders filled (and is the warm process's first); the third finds everything warm.
    for number in (0, 1, 2):
        write_edit(tree, 1000 + number, kind)
        edit_run(python, tree)
        await_warm_process(tree)
    collection(python, tree)


def measure(pythons: list[str], rounds: int, kind: str, keep: Path | None, pause: float = 0.0,
            gap: float = 0.0) -> None:
    base = Path(tempfile.mkdtemp(prefix="edit-loop-", dir=keep))
    try:
        trees = {}
        for index, python in enumerate(pythons):
            trees[python] = make_tree(base / f"tree{index}")
            warm(python, trees[python], kind)
        loads = [os.getloadavg()[0]]
        rows: dict[str, list] = {p: [] for p in pythons}
        for number in range(rounds):
            order = pythons if number % 2 == 0 else pythons[::-1]
            for python in order:
                time.sleep(pause)  # a learner's time between two saves: what the last run left behind finishes

                def edited(tree=trees[python]):
                    # The edit is written just before its run (a warm process compiles a saved file at
                    # once: written before the collection, it would have the collection's time too).
                    write_edit(tree, number, kind)
                    time.sleep(gap)  # the editor to the terminal: the saved file compiles meanwhile
                    return edit_run(python, tree)
                if number % 2 == 0:
                    run, bare = edited(), collection(python, trees[python])
                else:
                    bare, run = collection(python, trees[python]), edited()
                rows[python].append((run, bare))
                print(f"  round {number} {version_of(python)}: edited run {run[0]:.1f} s wall, {run[1]:.1f} s "
                      f"CPU; collection {bare[0]:.1f} s, {bare[1]:.1f} s", file=sys.stderr, flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        for tree in trees.values():
            stop_warm_process(tree)
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)
    runs = ("each edited run answered by the warm process the run before left (`pytest` as a learner runs it)"
            if WARM["runs"] else "each run in a process of its own (TPUCOURSE_WARM=0)")
    print(f"`python bench/edit_loop.py measure --rounds {rounds} --edit {kind}"
          f"{'' if WARM['runs'] else ' --warm no'}{f' --pause {pause:g}' if pause else ''}"
          f"{f' --gap {gap:g}' if gap else ''}`: {runs}; {os.cpu_count()} CPUs, "
          f"{platform.machine()}, {time.strftime('%Y-%m-%d')}, load average {min(loads):.1f}-{max(loads):.1f}\n")
    print("| Python, JAX | edited run: wall, CPU (median) | collection: wall, CPU (median) | "
          "ratio: wall (median, range) | ratio: CPU (median, range) |")
    print("|---|---|---|---|---|")
    medians = {}
    for python in pythons:
        pairs = rows[python]
        wall = [r[0] / b[0] for r, b in pairs]
        cpu = [r[1] / b[1] for r, b in pairs]
        medians[python] = (statistics.median(r[0] for r, _ in pairs), statistics.median(r[1] for r, _ in pairs))
        print(f"| {version_of(python)} | {medians[python][0]:.2f} s, {medians[python][1]:.2f} s | "
              f"{statistics.median(b[0] for _, b in pairs):.2f} s, {statistics.median(b[1] for _, b in pairs):.2f} s | "
              f"{statistics.median(wall):.2f}x ({min(wall):.2f}-{max(wall):.2f}) | "
              f"{statistics.median(cpu):.2f}x ({min(cpu):.2f}-{max(cpu):.2f}) |")
    if len(pythons) == 2:
        first, second = (rows[p] for p in pythons)
        wall = [b[0][0] / a[0][0] for a, b in zip(first, second)]
        cpu = [b[0][1] / a[0][1] for a, b in zip(first, second)]
        print(f"\n{version_of(pythons[1])} against {version_of(pythons[0])}, edited run, paired by round: "
              f"wall {statistics.median(wall):.2f}x ({min(wall):.2f}-{max(wall):.2f}), "
              f"CPU {statistics.median(cpu):.2f}x ({min(cpu):.2f}-{max(cpu):.2f})")


# ---------------------------------------------------------------------------------- profile

def profile(python: str, kind: str, edits: int, keep: Path | None) -> None:
    base = Path(tempfile.mkdtemp(prefix="edit-loop-", dir=keep))
    try:
        tree = make_tree(base / "tree")
        warm(python, tree, kind)
        results = []
        for number in range(edits):
            write_edit(tree, number, kind)
            out = base / f"profile{number}.json"
            done = subprocess.run([python, str(Path(__file__).resolve()), "_child", str(out), "--", TEST_FILE, "-q"],
                                  cwd=tree, capture_output=True, text=True, env=run_env(python))
            if done.returncode != 0 or not out.exists():
                sys.exit(f"the profiled run failed:\n{done.stdout[-4000:]}{done.stderr[-3000:]}")
            results.append(json.loads(out.read_text()))
        bare = base / "collection.json"
        subprocess.run([python, str(Path(__file__).resolve()), "_child", str(bare), "--", "--collect-only", "-q",
                        TEST_FILE], cwd=tree, capture_output=True, text=True, check=True)
        print_profile(python, kind, results, json.loads(bare.read_text()))
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)


def print_profile(python: str, kind: str, results: list[dict], bare: dict) -> None:
    load = os.getloadavg()[0]
    print(f"`python bench/edit_loop.py profile --python {python} --edit {kind}`: {version_of(python)}, "
          f"{time.strftime('%Y-%m-%d')}, load average {load:.1f}; the median of {len(results)} edited runs "
          f"(exclusive seconds; CPU is the whole process's while the main thread is in a span)\n")
    names = sorted({name for r in results for name in r["split"]},
                   key=lambda n: -statistics.median(r["split"].get(n, [0, 0, 0])[1] for r in results))
    print("| where | calls | wall | CPU |")
    print("|---|---|---|---|")
    for name in names:
        values = [r["split"].get(name, [0, 0.0, 0.0]) for r in results]
        calls, wall, cpu = (statistics.median(v[i] for v in values) for i in range(3))
        if wall >= 0.005 or cpu >= 0.005:
            print(f"| {name} | {calls:g} | {wall:.2f} s | {cpu:.2f} s |")
    for label, key in (("process, all threads (user + system)", "process_cpu"), ("wall, from Python's start", "wall")):
        print(f"| **{label}** | | {'' if key == 'process_cpu' else f'{statistics.median(r[key] for r in results):.2f} s'} | "
              f"{f'{statistics.median(r[key] for r in results):.2f} s' if key == 'process_cpu' else ''} |")
    print(f"\nThe bare collection in the same instruments: {bare['wall']:.2f} s wall, {bare['process_cpu']:.2f} s CPU.")
    print("\nProcess CPU by phase (every thread, and the child processes reaped in it), median:\n")
    print("| phase | edited run | bare collection |")
    print("|---|---|---|")
    for phase in dict.fromkeys(name for r in results + [bare] for name, *_ in r["phases"]):
        cells = []
        for runs in (results, [bare]):
            spent = [cpu for r in runs for name, cpu in _phase_cpu(r) if name == phase]
            cells.append(f"{statistics.median(spent):.2f} s" if spent else "")
        print(f"| {phase} | {cells[0]} | {cells[1]} |")
    print("\nLowerings by program (per run):\n")
    print("| program | platforms | where from | lowered | s |")
    print("|---|---|---|---|---|")
    lowerings: dict = {}
    for r in results:
        for row in r["lowerings"]:
            entry = lowerings.setdefault((row["name"], row["platforms"], row["origin"]), [0, 0.0])
            entry[0] += row["count"]
            entry[1] += row["seconds"]
    for (name, platforms, origin), (count, seconds) in sorted(lowerings.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{name}` | {platforms} | {origin} | {count / len(results):g} | {seconds / len(results):.2f} |")
    print("\nXLA compiles and kept programs loaded, by program (summed over the runs above, per run):\n")
    print("| program | kind | where from | compiled | loaded from kept/persistent cache | compile s |")
    print("|---|---|---|---|---|---|")
    programs: dict = {}
    for r in results:
        for row in r["programs"]:
            key = (row["name"], row["kind"], row["origin"])
            entry = programs.setdefault(key, [0, 0, 0.0])
            entry[0] += row["compiled"]
            entry[1] += row["loaded"]
            entry[2] += row["seconds"]
    for (name, kind_, origin), (compiled, loaded, seconds) in sorted(programs.items(), key=lambda kv: -kv[1][2]):
        n = len(results)
        print(f"| `{name}` | {kind_} | {origin} | {compiled / n:g} | {loaded / n:g} | {seconds / n:.2f} |")


def _phase_cpu(result: dict) -> list[tuple[str, float]]:
    """(phase, process CPU spent in it) from the marks: the first phase from the process's start."""
    spent, before = [], 0.0
    for name, _, cpu, children in result["phases"]:
        spent.append((name, cpu + children - before))
        before = cpu + children
    return spent


# ---------------------------------------------------------------------------------- the child

def child(out: Path, pytest_args: list[str]) -> int:
    """Run pytest in this process with the instruments on; write the split to `out`."""

    started_cpu = time.process_time()
    started = time.perf_counter() - (time.time() - _process_start_time())
    clock = _Clock()
    _instrument(clock)

    import pytest

    class Phases:
        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_collection(self, session):
            clock.mark("start: Python, imports, pytest's and the plugin's configure")
            try:
                with clock.span("pytest: collection (importing the test file, the plugin's collection hooks)"):
                    return (yield)
            finally:
                clock.mark("collection")

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtestloop(self, session):
            try:
                with clock.span("tests: the rest (pytest, the plugin's hooks, the tests' own Python)"):
                    return (yield)
            finally:
                clock.mark("tests")

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_call(self, item):
            hypothesis = getattr(getattr(item, "obj", None), "hypothesis", None)
            if hypothesis is not None and not getattr(hypothesis.inner_test, "timed", False):
                inner = hypothesis.inner_test

                def timed(*args, **kwargs):
                    with clock.span("tests: the rest (pytest, the plugin's hooks, the tests' own Python)"):
                        return inner(*args, **kwargs)
                timed.timed = True
                hypothesis.inner_test = timed
                with clock.span("hypothesis: its engine around the examples"):
                    return (yield)
            return (yield)

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_sessionfinish(self, session):
            with clock.span("session end: the summary, the state file, kept folders trimmed"):
                return (yield)

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_terminal_summary(self, terminalreporter):
            with clock.span("session end: the summary, the state file, kept folders trimmed"):
                return (yield)

        @pytest.hookimpl(tryfirst=True)
        def pytest_unconfigure(self, config):
            clock.mark("session end")
            write()

    def write():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        clock.close_main()
        data = {"split": clock.table(), "programs": clock.program_rows(), "lowerings": clock.lowering_rows(),
                "phases": clock.phases, "children_cpu": children.ru_utime + children.ru_stime,
                "process_cpu": usage.ru_utime + usage.ru_stime + children.ru_utime + children.ru_stime,
                "wall": time.perf_counter() - started, "cpu_at_start": started_cpu,
                "threads": threading.active_count()}
        out.write_text(json.dumps(data))

    with clock.span("start: Python, imports, pytest's and the plugin's configure"):
        status = pytest.main(pytest_args, plugins=[Phases()])
    from pytest_tpucourse.compiler import libtpu

    if libtpu._compiler is not None:  # its CPU counts once it is reaped
        libtpu._compiler.close()
    clock.mark("end (the TPU compiler's child reaped)")
    write()
    return int(status)


def _process_start_time() -> float:
    """When this process started (seconds since the epoch), from /proc; now elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except Exception:
        return time.time()


class _Clock:
    """Exclusive wall and thread-CPU seconds per named span, per thread, nested spans paused."""

    def __init__(self):
        import collections

        self.wall = collections.Counter()
        self.cpu = collections.Counter()
        self.calls = collections.Counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self.programs: dict = {}
        self.lowerings: dict = {}
        self.phases: list = []
        self.main = threading.get_ident()

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _charge(self, entry, now):
        name, wall0, cpu0 = entry
        with self._lock:
            self.wall[name] += now[0] - wall0
            self.cpu[name] += now[1] - cpu0

    def _now(self) -> tuple[float, float]:
        """(wall, CPU): the process's CPU on the main thread (what other threads do for it, an XLA
        compile or a program's run, counts where the main thread waits for it), the thread's own
        CPU on any other (shown apart: it is inside the main thread's figures already)."""
        main = threading.get_ident() == self.main
        return time.perf_counter(), time.process_time() if main else time.thread_time()

    def mark(self, phase: str) -> None:
        """Process CPU (all threads, and children reaped) and wall at the end of `phase`."""
        usage, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        self.phases.append((phase, time.perf_counter(), usage.ru_utime + usage.ru_stime,
                            children.ru_utime + children.ru_stime))

    def enter(self, name: str) -> None:
        if threading.get_ident() != self.main:
            name = "(other threads, inside the above) " + name
        stack, now = self._stack(), self._now()
        if stack:
            self._charge(stack[-1], now)
        stack.append([name, *now])
        with self._lock:
            self.calls[name] += 1

    def leave(self) -> None:
        stack, now = self._stack(), self._now()
        self._charge(stack.pop(), now)
        if stack:
            stack[-1][1:] = now

    def span(self, name: str):
        import contextlib

        @contextlib.contextmanager
        def spanning():
            self.enter(name)
            try:
                yield
            finally:
                self.leave()
        return spanning()

    def close_main(self) -> None:
        stack, now = self._stack(), self._now()
        for entry in stack:
            self._charge(entry, now)
            entry[1:] = now

    def table(self) -> dict:
        return {name: [self.calls[name], self.wall[name], self.cpu[name]] for name in self.wall}

    def program(self, name: str, kind: str, origin: str, compiled: int, loaded: int, seconds: float):
        with self._lock:
            row = self.programs.setdefault((name, kind, origin), [0, 0, 0.0])
            row[0] += compiled
            row[1] += loaded
            row[2] += seconds

    def lowered(self, name: str, platforms, origin: str, seconds: float):
        with self._lock:
            row = self.lowerings.setdefault((name, ",".join(platforms or ()), origin), [0, 0.0])
            row[0] += 1
            row[1] += seconds

    def lowering_rows(self) -> list[dict]:
        return [{"name": n, "platforms": p, "origin": o, "count": c, "seconds": s}
                for (n, p, o), (c, s) in self.lowerings.items()]

    def program_rows(self) -> list[dict]:
        return [{"name": n, "kind": k, "origin": o, "compiled": c, "loaded": l, "seconds": s}
                for (n, k, o), (c, l, s) in self.programs.items()]


def _wrap(clock: _Clock, owner, attribute: str, name: str):
    original = getattr(owner, attribute)

    def wrapped(*args, **kwargs):
        clock.enter(name)
        try:
            return original(*args, **kwargs)
        finally:
            clock.leave()
    wrapped.__wrapped__ = original
    setattr(owner, attribute, wrapped)
    return original


_TREE_FILES = re.compile(r"/exercises/|/solutions/")


def _origin() -> str:
    """Who asked for a compile or a lowering: the innermost frame of a graded test file, marked
    `checker` when the checker's references or oracle run it and `learner` when the graded
    tree's own code does, as `file:function`."""
    frame = sys._getframe(2)
    tags, test = [], None
    while frame is not None:
        filename = frame.f_code.co_filename
        name = Path(filename).name
        if "/references.py" in filename or ("/checks.py" in filename and "oracle" in frame.f_code.co_name):
            tags.append("checker")
        elif _TREE_FILES.search(filename) and not name.startswith("test_"):
            tags.append("learner")
        elif "pytest_tpucourse" in filename and not tags and name not in ("jax_internals.py", "compiled.py"):
            tags.append(f"{name}:{frame.f_code.co_name}")
        if name.startswith("test_") and _TREE_FILES.search(filename):
            test = frame.f_code.co_name
            break
        frame = frame.f_back
    return ", ".join(dict.fromkeys([*(tags[:1]), test or "?"]))


def _instrument(clock: _Clock) -> None:
    from jax._src import callback, compilation_cache, compiler
    from jax._src.interpreters import mlir, partial_eval, pxla

    _wrap(clock, partial_eval, "trace_to_jaxpr_dynamic", "JAX: tracing (the traced Python, learner's included)")
    original_lower = mlir.lower_jaxpr_to_module

    def lower_jaxpr_to_module(module_name, *args, **kwargs):
        start = time.perf_counter()
        clock.enter("JAX: lowering to StableHLO (Mosaic's included)")
        try:
            return original_lower(module_name, *args, **kwargs)
        finally:
            clock.leave()
            clock.lowered(module_name, kwargs.get("platforms"), _origin(), time.perf_counter() - start)
    mlir.lower_jaxpr_to_module = lower_jaxpr_to_module
    _wrap(clock, pxla.ExecuteReplicated, "__call__", "XLA: running compiled programs (callbacks apart)")
    _wrap(clock, compilation_cache, "get_executable_and_time", "JAX: persistent compilation cache reads")

    original_compile = compiler.backend_compile_and_load

    def compile_and_load(backend, module, executable_devices, options, host_callbacks):
        kind = "kernel (host callbacks)" if host_callbacks else "no callbacks"
        try:
            name = str(module.operation.attributes["sym_name"]).strip('"')
        except Exception:
            name = "?"
        origin = _origin()
        start = time.perf_counter()
        clock.enter(f"XLA: compiling, {kind}")
        try:
            return original_compile(backend, module, executable_devices, options, host_callbacks)
        finally:
            clock.leave()
            clock.program(name, kind, origin, 1, 0, time.perf_counter() - start)
    compiler.backend_compile_and_load = compile_and_load

    original_read = compilation_cache.get_executable_and_time

    def read(cache_key, *args, **kwargs):
        result = original_read(cache_key, *args, **kwargs)
        if result[0] is not None:
            clock.program("(persistent cache)", "no callbacks", _origin(), 0, 1, 0.0)
        return result
    compilation_cache.get_executable_and_time = read

    original_emit = callback.emit_python_callback

    def emit_python_callback(ctx, host_function, *args, **kwargs):
        def timed(*call_args):
            clock.enter("interpreter: host callbacks (any thread)")
            try:
                return host_function(*call_args)
            finally:
                clock.leave()
        return original_emit(ctx, timed, *args, **kwargs)
    callback.emit_python_callback = emit_python_callback

    from pytest_tpucourse.compiler import libtpu
    from pytest_tpucourse.core import jax_internals, kept_files
    from pytest_tpucourse.grading import solution_code, solution_reads, toolkit_guard
    from pytest_tpucourse.learner import run_markers, shipped, state

    original_load = jax_internals._load_or_compile

    def load_or_compile(path, backend, computation, *args):
        before = clock.calls["XLA: compiling, kernel (host callbacks)"]
        clock.enter("plugin: kept kernel programs loaded")
        try:
            return original_load(path, backend, computation, *args)
        finally:
            clock.leave()
            if clock.calls["XLA: compiling, kernel (host callbacks)"] == before:
                try:
                    name = str(computation.operation.attributes["sym_name"]).strip('"')
                except Exception:
                    name = "?"
                clock.program(name, "kernel (host callbacks)", _origin(), 0, 1, 0.0)
    jax_internals._load_or_compile = load_or_compile

    _wrap(clock, libtpu, "compile_for", "TPU compiler: compile_for (export, key, the child's compile)")
    _wrap(clock, libtpu._ChildCompiler, "compile", "TPU compiler: the child process compiling")
    _wrap(clock, solution_code, "shipped_solution_in", "plugin: shipped-solution walk")
    _wrap(clock, solution_reads, "_hook", "plugin: audit hook (solution reads)")
    _wrap(clock, toolkit_guard.ToolkitGuard, "restore_changed", "plugin: toolkit guard, after each test")
    _wrap(clock, toolkit_guard.ToolkitGuard, "watch_loaded", "plugin: toolkit guard, snapshots")
    _wrap(clock, shipped, "record", "plugin: the course's record of its shipped test files (shipped.json)")
    _wrap(clock, state, "record_results", "plugin: state file written")
    _wrap(clock, state, "read", "plugin: state file read")
    _wrap(clock, run_markers, "start", "plugin: run marker")
    _wrap(clock, run_markers, "summary_written", "plugin: run marker")
    _wrap(clock, kept_files, "trim", "plugin: kept folders trimmed")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        return child(Path(sys.argv[2]), sys.argv[sys.argv.index("--") + 1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="paired runs: the edited run against a bare collection")
    m.add_argument("--pythons", nargs="+", default=[str(REPO / ".venv/bin/python"), str(REPO / ".venv-newest/bin/python")],
                   help="each a Python, or PYTHON@ROOT: with the package of the checkout at ROOT (a before)")
    m.add_argument("--rounds", type=int, default=5)
    m.add_argument("--pause", type=float, default=0.0, metavar="SECONDS",
                   help="wait this long before each edit (a learner's time between saves; default: none)")
    m.add_argument("--gap", type=float, default=0.0, metavar="SECONDS",
                   help="wait this long between each edit and its run (a learner's way from the editor to "
                        "the terminal; default: none, the run starts as the file is written)")
    m.add_argument("--edit", choices=EDITS, default="both")
    m.add_argument("--keep", type=Path, help="make the trees under this folder and keep them")
    m.add_argument("--warm", choices=("yes", "no"), default="yes",
                   help="yes: pytest as a learner runs it, answered by the warm process the run before left; "
                   "no: every run in a process of its own (TPUCOURSE_WARM=0)")
    p = sub.add_parser("profile", help="where an edited run's time goes")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--edits", type=int, default=3)
    p.add_argument("--edit", choices=EDITS, default="both")
    p.add_argument("--keep", type=Path)
    args = parser.parse_args()
    if args.command == "measure":
        WARM["runs"] = args.warm == "yes"
        setups = [os.path.abspath(p) + (f"@{os.path.abspath(r)}" if r else "")
                  for p, r in map(_split, args.pythons)]
        measure(setups, args.rounds, args.edit, args.keep, args.pause, args.gap)
    else:
        WARM["runs"] = False  # the profile is of the run's own work, in its own process
        profile(os.path.abspath(args.python), args.edit, args.edits, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
