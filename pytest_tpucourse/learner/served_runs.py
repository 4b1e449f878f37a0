"""`pytest` in a course checkout, answered by a warm process of the same checkout.

A learner's edit loop is one kernel file changed, then `pytest exercises/chNN/test_x.py`. A
fresh process pays Python's start, the imports of pytest, hypothesis, NumPy, JAX and the
plugin, JAX's backend, and the lowering and compiles of every program the run needs, the
checker's references and the plugin's own included, though only the learner's kernel changed
(docs/speed.md, "The edit loop"). So a run of the learner's own loop that ends in this
process leaves a warm process behind (learner/warm_process.py), and the next `pytest` with
the same Python, package, JAX and environment hands it its arguments, its working directory,
its environment and its terminal (the three standard file descriptors, passed over a Unix
socket) and exits with the code it answers. The warm process runs pytest in itself, so what
did not change is still imported, traced and compiled; the learner's modules and test files
are imported anew each run.

What a run here looks like, a served run looks like: the same output on the same terminal,
the same state file and records, Ctrl-C, `breakpoint()`. Which runs are handed over
(`why_not_served`): only pytest's plain runs of a course checkout's graded tests (exercises/),
without `--gates`, `-n`, `--isolated`, `--collect-only`, `tpucourse grade`'s record or `watch`,
and never under CI, inside another test (PYTEST_CURRENT_TEST), or with TPUCOURSE_WARM=0. A
warm process that is busy, gone, of another key or for other backend options is not waited for:
the run happens here, as it always did.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path

ENV = "TPUCOURSE_WARM"  # "0": every run in its own process, no warm one left behind
IDLE_ENV = "TPUCOURSE_WARM_IDLE"  # seconds a warm process waits for its next run (default IDLE_SECONDS)
IDLE_SECONDS = 900.0
ANSWER_SECONDS = 0.3  # how long a client waits for a warm process's hello before running here
# Once greeted, how long a client waits for the warm process to accept its request. Either way nothing
# runs twice: the warm process runs a request only after the client's GO, sent once it has the accept.
ACCEPT_SECONDS = 5.0
GO = "go"
PROTOCOL = 2  # 2: a request runs only after the client's GO
STOP = "stop"  # the key a client sends to end the warm process (stop_warm_process)

# The environment a process's imports may read (JAX's flags, XLA's, the Python's own):
# a warm process serves only clients whose values of these are its own.
KEY_ENV_PREFIXES = ("JAX_", "XLA_", "TF_", "TPU", "LIBTPU", "CUDA", "PYTHON", "HYPOTHESIS", "TPUCOURSE_",
                    "LD_", "OMP_", "MKL_", "OPENBLAS_")
KEY_DISTRIBUTIONS = ("jax", "jaxlib", "libtpu", "numpy", "ml_dtypes", "pytest", "hypothesis", "pluggy")
PACKAGE = Path(__file__).resolve().parents[1]

SERVING = False  # True in a warm process: its runs leave no other warm process behind
_answer_before_exit = None  # in a warm process, during a run: tells the client the run's exit code
_environ_at_start: dict | None = None  # before JAX's backend adds its own (TPU_*): a warm process's environment


# ------------------------------------------------------------------------- which runs

def why_not_served(config) -> str | None:
    """Why this run happens in its own process (None: a warm process may answer it)."""
    from ..core.course import EXERCISES, find_course_root

    environ = os.environ
    if SERVING:
        return "this is the warm process"
    if environ.get(ENV, "") == "0":
        return f"{ENV}=0"
    if environ.get("CI") and environ.get(ENV) != "1":
        return "CI"
    if environ.get("PYTEST_CURRENT_TEST") or environ.get("PYTEST_XDIST_WORKER"):
        return "a run inside another test run"
    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        return "no Unix sockets"
    if getattr(config.invocation_params, "plugins", None) or not started_as_pytest():
        return "pytest.main() called from another program (its plugins and state are that process's)"
    option = config.option
    asked = [name for name in ("gates", "rehearse", "isolated", "collectonly", "help", "version", "showfixtures",
                               "show_fixtures_per_test", "markers") if getattr(option, name, False)]
    for name in ("tpucourse_results", "watch_run"):
        if getattr(option, name, None):
            asked.append(name)
    if getattr(option, "numprocesses", None) not in (None, 0, "0"):
        asked.append("numprocesses")
    if getattr(option, "dist", "no") not in ("no", None):
        asked.append("dist")
    if asked:
        return "asked for " + ", ".join(asked)
    root = find_course_root(config.rootpath)
    if root is None:
        return "not a course checkout"
    exercises = (root / EXERCISES).resolve()
    for arg in config.args:  # what the run collects: the arguments given, or testpaths
        path = Path(config.invocation_params.dir, str(arg).split("::")[0]).resolve()
        if not path.is_relative_to(exercises):
            return f"{arg} is not a graded test of {EXERCISES}/"
    return None


def started_as_pytest() -> bool:
    """This process is pytest's own command (`pytest`, `python -m pytest`), not a program that calls
    pytest.main() and may read what the run leaves in its memory."""
    first = sys.argv[0] if sys.argv else ""
    return Path(first).name in ("pytest", "py.test", "pytest.exe") or \
        Path(first).parts[-2:] == ("pytest", "__main__.py")


def backend_options(config) -> dict:
    """What a process's first run fixes for its life (JAX's CPU devices, its compilation cache)."""
    option = config.option
    return {"cpu_devices": getattr(option, "cpu_devices", None), "jax_cache": getattr(option, "jax_cache", None)}


def answer_before_exit(answer) -> None:
    """(The warm process) `answer(code, why)` tells the client its run's exit code and logs why the
    process ends with it; None: no run."""
    global _answer_before_exit
    _answer_before_exit = answer


def before_process_exit(code: int, why: str) -> None:
    """A run is about to end its process (os._exit: a graded call still running, `why`): a warm
    process tells its client the exit code first, as the client would have had it, and logs the run."""
    if _answer_before_exit is not None:
        try:
            _answer_before_exit(code, why)
        except OSError:
            pass


# ------------------------------------------------------------------------- the warm process's identity

def course_root_of(config) -> Path:
    from ..core.course import find_course_root

    return find_course_root(config.rootpath)


def socket_path(course_root: Path) -> Path:
    """A short path (Unix sockets allow about 100 bytes), in a folder only this user can open."""
    digest = hashlib.sha256(str(Path(course_root).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"tpucourse-{os.getuid()}" / f"{digest}.sock"


def log_path(course_root: Path) -> Path:
    """The warm process's log: each run it answered, and why it ended."""
    return socket_path(course_root).with_suffix(".log")


def private_folder(path: Path) -> Path:
    folder = path.parent
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{folder} is not this user's alone")
    return folder


def process_key(course_root: Path, environ=None) -> str:
    """What a warm process must share with a run to answer it: the Python, the versions of JAX and
    the libraries, this package's files as they are now, the course root and the environment its
    imports read. A package edited or upgraded makes a new key: the old process is never asked."""
    environ = os.environ if environ is None else environ
    files = []
    for path in sorted(PACKAGE.rglob("*.py")):
        info = path.stat()
        files.append((str(path.relative_to(PACKAGE)), info.st_size, info.st_mtime_ns))
    versions = {}
    for name in KEY_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    described = {
        "protocol": PROTOCOL,
        "python": [sys.executable, sys.version],
        "course": str(Path(course_root).resolve()),
        "package": files,
        "versions": versions,
        "environment": sorted((k, v) for k, v in environ.items() if k.startswith(KEY_ENV_PREFIXES)),
    }
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()


# ------------------------------------------------------------------------- messages

def send_message(connection: socket.socket, message: dict, fds=()) -> None:
    data = (json.dumps(message) + "\n").encode()
    if fds:
        socket.send_fds(connection, [data[:1]], list(fds))
        data = data[1:]
    connection.sendall(data)


class Messages:
    """JSON lines from a socket, with the file descriptors that came with them."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.buffer = b""
        self.fds: list[int] = []

    def next(self, with_fds: int = 0) -> dict | None:
        while b"\n" not in self.buffer:
            if with_fds and not self.fds:
                data, fds, _, _ = socket.recv_fds(self.connection, 65536, with_fds)
                self.fds.extend(fds)
            else:
                data = self.connection.recv(65536)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


# ------------------------------------------------------------------------- the client

def serve_run(config) -> None:
    """None: run it here. Else the run is handed to a warm process, and this process ends with the
    exit code it answers."""
    global _environ_at_start
    if _environ_at_start is None:
        _environ_at_start = dict(os.environ)
    if why_not_served(config) is not None:
        return None
    root = course_root_of(config)
    connection = _connect(socket_path(root), ANSWER_SECONDS)
    if connection is None:
        return None
    key = process_key(root)
    try:
        messages = Messages(connection)
        if not _same_key(connection, messages, key):
            connection.close()
            return None
        _terminal_as_given(config)
        streams = [sys.stdin, sys.stdout, sys.stderr]
        for stream in streams[1:]:
            stream.flush()
        send_message(connection, {
            "key": key, "args": list(config.invocation_params.args), "cwd": os.getcwd(),
            "env": dict(os.environ), "argv": list(sys.argv), "backend": backend_options(config),
            "encodings": [[getattr(s, "encoding", None) or "utf-8", getattr(s, "errors", None) or "strict"]
                          for s in streams],
        }, fds=[0, 1, 2])
        connection.settimeout(ACCEPT_SECONDS)
        answer = messages.next()
        if not answer or not answer.get("accepted"):
            connection.close()
            return None
        # Committed from here: the warm process runs the request only once it reads this, so a
        # client that gave up above (and runs here) never has its run made twice.
        send_message(connection, {GO: True})
    except (OSError, ValueError):
        connection.close()
        return None
    connection.settimeout(None)
    code = _await_exit(connection, messages)
    # The run is answered: this process ends now (warm_runs.exit_now), its exit functions run and
    # its output flushed, without the interpreter's teardown of the modules it imported, which took
    # a client 50 ms of each run (docs/speed.md). It configured nothing of pytest's: what its own
    # import of the conftest files printed, pytest holds to print at a configured run's end, and the
    # warm process's run prints it instead.
    from .warm_runs import exit_now

    exit_now(code)


def _terminal_as_given(config) -> None:
    """Standard input as the client was given it: pytest captures it from the start (the initial
    conftests) and gives back only output until a test runs, so descriptor 0 is /dev/null here
    until its capture is suspended with its input too (what pytest's own debugger does)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)


def _same_key(connection: socket.socket, messages: Messages, key: str) -> bool:
    """The warm process's hello names this run's key; one that names another is told to end."""
    hello = messages.next()
    if hello and hello.get("key") == key:
        return True
    if hello:
        send_message(connection, {"key": key})
    return False


def _await_exit(connection: socket.socket, messages: Messages) -> int:
    """The warm process runs the tests on this terminal; Ctrl-C here is Ctrl-C there."""
    def forward(signum, frame):
        try:
            connection.sendall(b"I")
        except OSError:
            pass

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, forward) if in_main_thread else None
    try:
        answer = messages.next()
    except (OSError, ValueError):
        answer = None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        connection.close()
    if answer is None or "exit" not in answer:
        sys.stderr.write("tpucourse: the warm process ended before the run's end (its summary above is all "
                         "it wrote); run pytest again\n")
        return 3
    return int(answer["exit"])


def leave_warm_process(config) -> None:
    """After a run here that a warm process could have answered: start one for the next run,
    unless one of this key is running already."""
    if why_not_served(config) is not None:
        return
    root = course_root_of(config)
    path = socket_path(root)
    try:
        private_folder(path)
    except OSError:
        return
    if _answers(path, process_key(root, _environ_at_start)):
        return
    command = [sys.executable, "-m", "pytest_tpucourse.learner.warm_process", str(root),
               json.dumps(backend_options(config))]
    try:
        subprocess.Popen(command, cwd=root, env=_environ_at_start or os.environ, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        pass


def _connect(path: Path, seconds: float) -> socket.socket | None:
    """A connection to the warm process listening at `path`, its timeout `seconds`; None: none listens."""
    if not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(seconds)
        connection.connect(str(path))
    except OSError:
        connection.close()
        return None
    return connection


def _answers(path: Path, key: str) -> bool:
    """A warm process of this key listens at `path`, idle or busy (it is asked to run nothing)."""
    connection = _connect(path, ANSWER_SECONDS)
    if connection is None:
        return False
    with connection:
        try:
            return _same_key(connection, Messages(connection), key)
        except socket.timeout:  # connected, no hello: busy with a run
            return True
        except (OSError, ValueError):
            return False


def listening(course_root: Path) -> bool:
    """A warm process of this checkout is listening (whatever its key)."""
    connection = _connect(socket_path(course_root), ANSWER_SECONDS)
    if connection is None:
        return False
    connection.close()
    return True


def stop_warm_process(course_root: Path) -> bool:
    """End the checkout's warm process, idle (a busy one ends after its run); whether one answered."""
    connection = _connect(socket_path(course_root), 5.0)
    if connection is None:
        return False
    with connection:
        try:
            if Messages(connection).next() is None:
                return False
            send_message(connection, {"key": STOP})
            return True
        except (OSError, ValueError):
            return False
