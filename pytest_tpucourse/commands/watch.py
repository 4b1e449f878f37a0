"""`tpucourse watch [chNN | chNN.exercise]`: on each save under exercises/, re-run the tests it concerns.

The watcher says at once what changed and what it runs (learner/watch_targets.py), then runs
pytest in a child forked from one warm process (learner/warm_runs.py), so a save is answered in
seconds and a hung kernel cannot take the watcher down. In that run (learner/watch_run.py) the
test the save most likely broke runs first and its answer shows at once; the rest of the file
follows, every test to its end, so no first failure hides a better report. Between runs it
blocks on the operating system's file events (watchfiles), it never polls. After a run it says
how each exercise it ran stands, a failing one by its most telling failure (learner/telling.py),
and what is next.
"""

from __future__ import annotations

import shlex
import signal
import uuid

from ..core.course import EXERCISES, Course
from ..learner import run_history, state
from ..learner.requests import RequestError, course_here, read_state
from ..learner.warm_runs import WarmRuns
from ..learner.watch_targets import Target, changed_paths, summary_after_run, target_of_argument, target_of_changes

RUST_TIMEOUT_MS = 500  # how often the file watcher wakes with nothing to report (it does not poll files)


def add_parser(subcommands):
    w = subcommands.add_parser("watch", help="on each save under exercises/, re-run the graded tests it concerns")
    w.add_argument("target", nargs="?", help="what the first run covers: chNN (the chapter), chNN.exercise "
                   "(its tests); default: your next exercise")
    w.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    w.add_argument("--pytest-args", default="", metavar="ARGS",
                   help="extra pytest arguments, e.g. --pytest-args='--interpret fast'")
    return w


def run(args) -> int:
    try:
        import watchfiles
    except ImportError:  # the course runs without it; only this command needs the OS's file events
        raise RequestError("needs watchfiles: pip install watchfiles "
                           "(or, in the course checkout, pip install -e .); pytest runs "
                           "the exercises without it") from None

    course = course_here()
    data = read_state(course)
    target = target_of_argument(course, data, args.target)
    if args.max_runs is not None and args.max_runs < 1:
        raise RequestError("--max-runs must be at least 1")
    default_chapter = (target.chapters or [target.exercises[0].chapter])[0]
    extra = shlex.split(args.pytest_args)
    runs = WarmRuns(course.root)

    # Watching starts before the first run, so a save made while a run goes on is not lost:
    # the first (empty) yield comes once the file watcher is running.
    events = watchfiles.watch(course.root / EXERCISES, watch_filter=_python_changes, debounce=100,
                              rust_timeout=RUST_TIMEOUT_MS, yield_on_timeout=True, raise_interrupt=False)
    code = 130
    try:
        next(events)
        print(f"watch: running {target.names()}", flush=True)
        code = run_once(course, runs, target, extra)
        count = 1
        if args.max_runs is not None and count >= args.max_runs:
            return code
        runs.preload()  # before the first save, so that save is answered warm
        print(waiting(runs), flush=True)
        for changes in events:
            changed = changed_paths(course, changes)
            if not changed:
                continue
            target = target_of_changes(course, changed, default_chapter)
            print(f"changed: {', '.join(changed)}, running {target.names()}", flush=True)
            code = run_once(course, runs, target, extra)
            count += 1
            if args.max_runs is not None and count >= args.max_runs:
                break
            print(waiting(runs), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        events.close()
    return code


def waiting(runs: WarmRuns) -> str:
    return f"watch: waiting for changes under exercises/ ({runs.mode}; Ctrl-C to stop)"


def _python_changes(change, path: str) -> bool:
    return path.endswith(".py")


def run_once(course: Course, runs: WarmRuns, target: Target, extra: list[str]) -> int:
    token = uuid.uuid4().hex
    code = runs.run([*target.pytest_paths(), f"--watch-run={token}", *extra])  # learner/watch_run.py
    lines = []
    if code < 0:
        lines.append(f"watch: the run was killed by {_signal_name(-code)} before it ended; "
                     f"the watch goes on, and the state file keeps what earlier runs showed")
    try:
        lines += summary_after_run(course, target, run_history.last_run_failures(course.root, token))
    except state.CorruptState as error:
        lines.append(f"watch: {error}")
    print("\n".join(lines), flush=True)
    return code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
