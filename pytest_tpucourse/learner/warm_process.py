"""The warm process that answers a course checkout's `pytest` runs (learner/served_runs.py).

`python -m pytest_tpucourse.learner.warm_process COURSE_ROOT BACKEND_OPTIONS` is started by a
run that ended in its own process, with that run's backend options. It imports what every run
imports (warm_runs.preload), listens on the checkout's socket, and runs each request's pytest
in itself, one at a time, on the client's terminal. Around each run it puts back what a run may
change of the process (the environment, the working directory, sys.argv and sys.path, the
SIGINT handler, the standard streams) and forgets the modules of the course checkout (the
learner's, the test files, conftest.py), so each run imports them anew, while JAX, the plugin,
the checker's references and the programs they compiled stay warm. Between runs it watches the
graded files the last run called and compiles their programs once one is saved
(compiles_on_save.py), checking itself afterwards as after a run.

It answers, then ends, when a run leaves it unlike what the next run may trust (`reasons_to_end`):
a thread the run started still running, a function, class or module of a loaded module replaced
by code that is not this package's (a learner's module patching JAX or NumPy), one of JAX's
flags changed, an interrupted or crashed run, memory past MAX_RSS_BYTES, or MAX_RUNS runs. It
also ends when it has waited its idle time for a run, when a client of another key greets it,
and when its socket is no longer its own. Ended, the next `pytest` runs in its own process and
leaves a new one. Its log (served_runs.log_path) has a line for each run and why it ended; a run
that ended in exit code 3 (pytest's INTERNALERROR, or a run that raised) also leaves there the end
of its own output and its traceback, which its client's terminal may no longer show.

A run that cannot end normally (a graded call still running) ends the process itself from its
last hook (run/session.py), once its client has the exit code (`answer_and_end`): from then on
the client's leaving is no Ctrl-C.
"""

from __future__ import annotations

import fcntl
import gc
import io
import json
import linecache
import os
import signal
import socket
import sys
import threading
import traceback
import types
from pathlib import Path

from . import served_runs
from .compiles_on_save import CompilesOnSave
from .served_runs import Messages, send_message

MAX_RUNS = 200
MAX_RSS_BYTES = 4 * 1024 ** 3
LOG_LINES = 400
# A run that ends in exit code 3 (pytest's INTERNALERROR, or the run raised) has the end of its own output
# and its traceback kept in the log (`log_failed_run`): its client may be gone, and its terminal with it.
KEPT_OUTPUT_BYTES = 16384
KEPT_LINES = 80
REQUEST_SECONDS = 5.0  # a client that greets and then sends nothing is dropped after this
CHECKOUT_LOOK_SECONDS = 30.0

INTERNAL_ERROR = 3  # pytest.ExitCode.INTERNAL_ERROR, and the code of a run that raised

# JAX flags the course's runs set themselves (grading/backend.py): a first run sets them, later
# runs set them to the same values. Any other flag a run leaves changed ends the process.
FLAGS_A_RUN_SETS = frozenset({
    "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes", "jax_num_cpu_devices",
})


def main(argv: list[str]) -> int:
    root, backend = Path(argv[0]).resolve(), json.loads(argv[1])
    path = served_runs.socket_path(root)
    served_runs.private_folder(path)
    lock = open(path.with_suffix(".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another warm process of this checkout is starting or running
        return 0
    served_runs.SERVING = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # between runs; each run has Python's default
    os.chdir(root)
    environ_at_start = dict(os.environ)
    key = served_runs.process_key(root)
    from .warm_runs import preload

    preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(8)
    ours = path.stat().st_ino
    log(root, f"listening for runs of {root}")
    threading.excepthook = lambda hook: _log_thread_failure(root, hook)
    warm = WarmProcess(root, key, backend, environ_at_start)
    warm.between_runs()
    idle = float(os.environ.get(served_runs.IDLE_ENV, served_runs.IDLE_SECONDS))
    try:
        while True:
            try:
                connection = _next_client(listener, root, idle, between=warm.look_at_saved_files)
            except socket.timeout:
                log(root, f"no run for {idle:g} s: this process ends")
                break
            except _MustEnd as reasons:
                log(root, f"after compiling saved files: this process ends: {reasons}")
                break
            except Exception as error:  # this module's own mistake between runs: said, not lost to DEVNULL
                log_block(root, f"failed between runs: {type(error).__name__}: {error}: this process ends",
                          traceback.format_exc())
                break
            if connection is None:  # the checkout is gone (a temporary copy deleted)
                break
            with connection:
                try:
                    ended = warm.answer(connection)
                except Exception as error:  # this module's own mistake: the process ends, the client hears so
                    log(root, f"failed: {type(error).__name__}: {error}: this process ends")
                    ended = True
            if ended or not _still_ours(path, ours):
                break
    finally:
        if _still_ours(path, ours):
            path.unlink()
        listener.close()
    return 0


def _log_thread_failure(root: Path, hook) -> None:
    """What a thread of this process raised, in its log: its standard streams are DEVNULL."""
    text = "".join(traceback.format_exception(hook.exc_type, hook.exc_value, hook.exc_traceback))
    name = hook.thread.name if hook.thread is not None else "a thread"
    log_block(root, f"{name} raised {hook.exc_type.__name__}: {hook.exc_value}", text)


class _MustEnd(Exception):
    """The process cannot vouch for itself any more (the reasons, joined)."""


def _next_client(listener: socket.socket, root: Path, idle: float, between=None) -> socket.socket | None:
    """The next client within `idle` seconds (socket.timeout after them); None once the checkout's
    folder is gone, looked at every CHECKOUT_LOOK_SECONDS. `between`, if given, is called every
    compiles_on_save.LOOK_SECONDS meanwhile."""
    import time

    from .compiles_on_save import LOOK_SECONDS

    deadline = time.monotonic() + idle
    checkout_looked = time.monotonic()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout
        listener.settimeout(min(left, LOOK_SECONDS if between is not None else CHECKOUT_LOOK_SECONDS))
        try:
            return listener.accept()[0]
        except socket.timeout:
            if between is not None:
                between()
            if time.monotonic() - checkout_looked >= CHECKOUT_LOOK_SECONDS or between is None:
                checkout_looked = time.monotonic()
                if not root.is_dir():
                    return None


def log(course_root: Path, line: str) -> None:
    """One line of the warm process's log (served_runs.log_path): its runs, and why it ended."""
    import time

    path = served_runs.log_path(course_root)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()[-(LOG_LINES - 1):] if path.exists() else []
        lines.append(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {line}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError:
        pass


def log_block(course_root: Path, title: str, text: str) -> None:
    """`title`, then the last KEPT_LINES lines of `text`, each indented, in the log."""
    lines = text.rstrip().splitlines()
    cut = len(lines) > KEPT_LINES
    shown = "\n".join("    | " + line for line in lines[-KEPT_LINES:])
    log(course_root, f"{title}{f' (its last {KEPT_LINES} lines)' if cut else ''}:\n{shown}")


def _still_ours(path: Path, inode: int) -> bool:
    try:
        return path.stat().st_ino == inode
    except OSError:
        return False


class WarmProcess:
    def __init__(self, root: Path, key: str, backend: dict, environ_at_start: dict):
        self.root = root
        self.environ_at_start = environ_at_start
        self.key = key
        self.backend = backend
        self.runs = 0
        self.output = ""  # the end of the last run's output on its terminal (KEPT_OUTPUT_BYTES)
        self.failure: str | None = None  # the traceback of the last run, where it raised
        self.on_save = CompilesOnSave(report=lambda line: log(root, line))  # between runs (compiles_on_save.py)

    def answer(self, connection: socket.socket) -> bool:
        """Greet, take one request and run it; whether this process ends now."""
        connection.settimeout(REQUEST_SECONDS)
        messages = Messages(connection)
        accepted = False
        try:
            if not _same_user(connection):
                return False
            send_message(connection, {"key": self.key, "pid": os.getpid()})
            request = messages.next(with_fds=3)
            if request is None:
                return False
            if request.get("key") == served_runs.STOP:
                log(self.root, "asked to stop: this process ends")
                return True
            if request.get("key") != self.key:  # a newer package or environment: it leaves its own
                log(self.root, "a client of another key (Python, package, libraries or environment): "
                               "this process ends")
                return True
            if "args" not in request or len(messages.fds) != 3:
                return False
            if request.get("backend") != self.backend:
                send_message(connection, {"accepted": False, "why": "other backend options"})
                return False
            send_message(connection, {"accepted": True})
            go = messages.next()  # the client still waits for this run: it may have given up and run it itself
            if not go or not go.get(served_runs.GO):
                log(self.root, "a client gave up before its run began: nothing ran here")
                return False
            connection.settimeout(None)
            accepted = True
        except (OSError, ValueError):
            return False
        finally:
            if not accepted:
                for fd in messages.fds:
                    os.close(fd)
        self.on_save.before_run()
        code = self.run(request, messages.fds, connection)
        try:
            send_message(connection, {"exit": code})
        except OSError:
            pass
        reasons = self.after_run(code)  # the client has its answer: the rest is off its clock
        log(self.root, self._run_line(request, code) + (f"; this process ends: {'; '.join(reasons)}" if reasons else ""))
        if code == INTERNAL_ERROR:
            self.log_failed_run()
        return bool(reasons)

    def log_failed_run(self) -> None:
        """The run's own account of its exit code 3, kept in the log: the end of its output (pytest's
        INTERNALERROR lines) and the traceback of what it raised. Its client, and the terminal it
        was written to, may be gone (a test's captured output, a closed window)."""
        if self.output.strip():
            log_block(self.root, f"run {self.runs}: the end of its output", self.output)
        if self.failure:
            log_block(self.root, f"run {self.runs}: what it raised", self.failure)

    def _run_line(self, request: dict, code: int) -> str:
        return f"run {self.runs}: pytest {' '.join(request['args'])} exited {code}"

    def between_runs(self) -> None:
        """What the next run is checked against, taken while no run waits: the checkout's modules
        forgotten, the heap's survivors set aside from the garbage collector's walks (as
        core/startup_heap.py does for a fresh process), and the process's state as it is."""
        forget_course_modules(self.root)
        gc.collect()
        gc.freeze()
        self.modules = ModuleFunctions.now()
        self.flags = _jax_flags()
        self.threads = set(threading.enumerate())

    def run(self, request: dict, fds: list[int], connection: socket.socket) -> int:
        """pytest.main(the request's args) in this process, on the client's terminal."""
        import pytest

        from .warm_runs import NOT_REWRITTEN

        self.runs += 1
        self.output, self.failure = "", None
        before = ProcessState()
        linecache.checkcache()
        interrupts = _Interrupts(connection)
        code = INTERNAL_ERROR

        def answer_and_end(exit_code: int, why: str) -> None:  # the run ends this process itself
            # The run is over: its client, once answered, leaves, and its leaving is no Ctrl-C. Heard
            # as one, it raised KeyboardInterrupt here, in pytest_unconfigure, before the process could
            # end: the run "failed" with exit code 3 and its line was never logged (issue 55).
            interrupts.stop()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # a press already on its way is dropped too
            try:
                send_message(connection, {"exit": exit_code})
            finally:
                log(self.root, f"{self._run_line(request, exit_code)}; this process ends: {why}")

        with _terminal(fds, request.get("encodings")) as terminal:
            served_runs.answer_before_exit(answer_and_end)
            try:
                started = {k: v for k, v in os.environ.items() if self.environ_at_start.get(k) != v}
                os.environ.clear()
                os.environ.update(request["env"])
                os.environ.update(started)  # what JAX's backends set when they started (TPU_SKIP_MDS_QUERY)
                os.chdir(request["cwd"])
                sys.argv = list(request["argv"])
                signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh process
                interrupts.start()
                code = int(pytest.main([*NOT_REWRITTEN, *request["args"]]))
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException as error:  # KeyboardInterrupt outside the session, or pytest's own crash
                self.failure = traceback.format_exc()
                try:
                    sys.stdout.flush()  # what the run wrote before it failed, first
                except (OSError, ValueError):
                    pass
                sys.stderr.write(f"tpucourse: the warm process's run failed: {type(error).__name__}: {error} "
                                 f"(its traceback: {served_runs.log_path(self.root)})\n")
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt that comes late is no one's
                interrupts.stop()
                served_runs.answer_before_exit(None)
                before.restore()
        self.output = terminal.kept_output()
        return code

    def after_run(self, code: int) -> list[str]:
        """Why this process must end after the run (none: it waits for the next)."""
        reasons = self.reasons_to_end(code, self.modules, self.flags, self.threads)
        if not reasons:
            self.between_runs()
            self.on_save.after_run()
        return reasons

    def look_at_saved_files(self) -> None:
        """Between runs: a graded file saved starts its compiles (compiles_on_save.py); once they
        end, the process checks itself as after a run (raises _MustEnd where it cannot go on)."""
        self.on_save.look()
        reasons = []
        if self.on_save.finished.is_set():
            self.on_save.finished.clear()
            reasons = self.reasons_to_end(0, self.modules, self.flags, self.threads)
        if self.on_save.stuck():
            reasons.append("the learner's code, imported to compile a saved file, has not returned")
        if reasons:
            raise _MustEnd("; ".join(reasons))

    def reasons_to_end(self, code: int, modules: ModuleFunctions, flags: dict, threads: set) -> list[str]:
        import pytest

        reasons = []
        if code in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
            reasons.append(f"the run ended with exit code {code}")
        left = [t.name for t in threading.enumerate() if t not in threads and t.is_alive() and not t.daemon]
        if left:
            reasons.append(f"threads still running: {', '.join(left)}")
        from ..grading import ahead

        if ahead.still_running():
            reasons.append("a program compiled ahead is still tracing the learner's code")
        replaced = modules.replaced(self.root)
        if replaced:
            reasons.append(f"replaced by the run: {', '.join(replaced[:5])}")
        changed = sorted(name for name, value in _jax_flags().items()
                         if flags.get(name, value) != value and not (name in FLAGS_A_RUN_SETS and self.runs == 1))
        if changed:
            reasons.append(f"JAX flags changed: {', '.join(changed)}")
        if _rss() > MAX_RSS_BYTES:
            reasons.append(f"memory past {MAX_RSS_BYTES >> 30} GiB")
        if self.runs >= MAX_RUNS:
            reasons.append(f"{MAX_RUNS} runs")
        return reasons


def _same_user(connection: socket.socket) -> bool:
    """The client runs as this process's user (the socket's folder is private too)."""
    import struct

    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return uid == os.getuid()


# ------------------------------------------------------------------------- what a run may change

class ProcessState:
    """The process-wide settings a run may change, to put back after it."""

    def __init__(self):
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.argv = list(sys.argv)
        self.path = list(sys.path)
        self.sigint = signal.getsignal(signal.SIGINT)

    def restore(self) -> None:
        os.environ.clear()
        os.environ.update(self.environ)
        os.chdir(self.cwd)
        sys.argv[:] = self.argv
        sys.path[:] = self.path
        signal.signal(signal.SIGINT, self.sigint)


# What a run sets in a module by design: pytest keeps a failed test's exception in sys.last_*
# (for pdb's post-mortem), a class among them.
RUN_STATE = frozenset({("sys", "last_type"), ("sys", "last_value"), ("sys", "last_traceback"), ("sys", "last_exc")})


class ModuleFunctions:
    """The functions, classes and modules every loaded module binds, by name."""

    def __init__(self, bound: dict):
        self.bound = bound  # module name -> (module, {attribute: value})

    @classmethod
    def now(cls) -> ModuleFunctions:
        bound = {}
        for name, module in list(sys.modules.items()):
            if isinstance(module, types.ModuleType) and name != "__main__":
                bound[name] = (module, {k: v for k, v in vars(module).items()
                                        if _is_code(v) and (name, k) not in RUN_STATE})
        return cls(bound)

    def replaced(self, course_root: Path) -> list[str]:
        """Attributes bound to other code since, by code that is not this package's."""
        found = []
        for name, (module, attributes) in self.bound.items():
            if sys.modules.get(name) is not module or _is_course_module(module, course_root):
                continue
            namespace = vars(module)
            for attribute, value in attributes.items():
                now = namespace.get(attribute, _GONE)
                if now is not value and not _from_this_package(now):
                    found.append(f"{name}.{attribute}")
        return found


_GONE = object()


def _is_code(value) -> bool:
    """Functions, classes, modules and what calls like one (NumPy's dispatchers, JAX's jitted
    functions): what a patch replaces. Data a module keeps (counters, caches) is a run's to change."""
    return callable(value) or isinstance(value, types.ModuleType)


def _from_this_package(value) -> bool:
    code = getattr(value, "__code__", None)
    file = getattr(code, "co_filename", None) or getattr(value, "__file__", None)
    if not file:
        return False
    try:
        return Path(file).resolve().is_relative_to(served_runs.PACKAGE)
    except (OSError, ValueError):
        return False


def forget_course_modules(course_root: Path) -> None:
    """Forget every module loaded from the course checkout (not this package, nor a virtual
    environment inside it) and the graded trees' packages: the next run imports them anew."""
    for name, module in list(sys.modules.items()):
        if name.startswith(("_tpucourse_graded_", "_tpucourse_file_", "_tpucourse_xray_", "_tpucourse_timeline_")) \
                or _is_course_module(module, course_root):
            del sys.modules[name]
    from ..grading import solution_code

    solution_code.forget_commits()


def _is_course_module(module, course_root: Path) -> bool:
    """A module of the checkout's files, or a package of its folders (pytest's `exercises.ch11`)."""
    file = getattr(module, "__file__", None)
    if file is None:
        path = getattr(module, "__path__", None)
        try:
            file = next(iter(path), None) if path is not None else None
        except Exception:  # a namespace package whose parent is gone recalculates its path and fails
            file = None
    return _is_course_file(file, course_root)


_course_files: dict[tuple[str, Path], bool] = {}  # (module file, course root) -> whether it is the checkout's


def _is_course_file(file, course_root: Path) -> bool:
    if not isinstance(file, str):
        return False
    known = _course_files.get((file, course_root))
    if known is None:
        known = _course_files[(file, course_root)] = _resolves_into_course(file, course_root)
    return known


def _resolves_into_course(file: str, course_root: Path) -> bool:
    try:
        path = Path(file).resolve()
    except (OSError, ValueError):
        return False
    if not path.is_relative_to(course_root) or path.is_relative_to(served_runs.PACKAGE):
        return False
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return not any(path.is_relative_to(prefix) for prefix in prefixes)


def _jax_flags() -> dict:
    jax = sys.modules.get("jax")
    values = getattr(getattr(jax, "config", None), "values", None)
    return dict(values) if isinstance(values, dict) else {}


def _rss() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _KeptOutput(io.FileIO):
    """A standard stream's file descriptor that keeps the last KEPT_OUTPUT_BYTES written to it (shared
    by stdout and stderr, in the order written), for the log of a run that crashed."""

    def __init__(self, fd: int, kept: bytearray):
        super().__init__(fd, "wb", closefd=False)
        self.kept = kept

    def write(self, data) -> int | None:
        try:
            written = super().write(data)
        except OSError:  # the client's terminal is gone: what it was not shown is kept all the same
            self._keep(bytes(data))
            raise
        if written:
            self._keep(bytes(data[:written]))
        return written

    def _keep(self, data: bytes) -> None:
        self.kept += data
        if len(self.kept) > 2 * KEPT_OUTPUT_BYTES:
            del self.kept[:-KEPT_OUTPUT_BYTES]


class _terminal:
    """The client's stdin, stdout and stderr as this process's, for one run (what the run writes to
    them through sys.stdout and sys.stderr is also kept: `kept_output`)."""

    def __init__(self, fds: list[int], encodings):
        self.fds = fds
        self.encodings = encodings or [["utf-8", "strict"]] * 3
        self.kept = bytearray()

    def kept_output(self) -> str:
        """The end of what the run wrote to its terminal through Python's streams."""
        return bytes(self.kept[-KEPT_OUTPUT_BYTES:]).decode("utf-8", "replace")

    def __enter__(self):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.saved_fds = [os.dup(n) for n in (0, 1, 2)]
        self.saved_streams = (sys.stdin, sys.stdout, sys.stderr)
        for n, fd in enumerate(self.fds):
            os.dup2(fd, n)
            os.close(fd)
        (in_encoding, in_errors), (out_encoding, out_errors), (err_encoding, err_errors) = self.encodings
        sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=in_encoding, errors=in_errors)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_KeptOutput(1, self.kept)), encoding=out_encoding,
                                      errors=out_errors, line_buffering=os.isatty(1))
        sys.stderr = io.TextIOWrapper(io.BufferedWriter(_KeptOutput(2, self.kept)), encoding=err_encoding,
                                      errors=err_errors, line_buffering=True, write_through=True)
        return self

    def __exit__(self, *exc):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        sys.stdin, sys.stdout, sys.stderr = self.saved_streams
        for n, fd in enumerate(self.saved_fds):
            os.dup2(fd, n)
            os.close(fd)
        return False


class _Interrupts:
    """Ctrl-C at the client (a byte "I"), or the client gone, is SIGINT here during the run."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.running = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._listen, name="tpucourse-warm-interrupts", daemon=True)

    def start(self) -> None:
        self.running.set()
        self.thread.start()

    def stop(self) -> None:
        with self.lock:
            self.running.clear()

    def _listen(self) -> None:
        while self.running.is_set():
            try:
                data = self.connection.recv(1)
            except OSError:
                data = b""
            with self.lock:
                if not self.running.is_set():
                    return
                os.kill(os.getpid(), signal.SIGINT)
            if not data:  # the client is gone: one interrupt, then nothing more to hear
                return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
