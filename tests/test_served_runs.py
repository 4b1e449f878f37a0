"""`pytest` answered by the warm process an earlier run of the checkout left (learner/served_runs.py,
learner/warm_process.py): the learner's edits are what it runs, its answers are a fresh run's
(output, exit code, state file), the runs that must have a process of their own never reach it,
Ctrl-C reaches the run, and it ends when it cannot vouch for itself: a patched library, an
interrupted run, another key, idle time."""

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_tpucourse.learner import served_runs, state, warm_process

from .support import DEFAULT_SIGINT, FAKE_TPU_CONFTEST, GRADED_TEST, is_xdist_variable

WAIT_SECONDS = 90  # a warm process imports pytest, JAX and the plugin before it listens


def learner_env(**extra) -> dict:
    """The environment of a learner's terminal: no CI, no test run around it, no xdist worker."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS", served_runs.ENV) and not is_xdist_variable(k)}
    env[served_runs.IDLE_ENV] = "300"  # one this suite failed to end still ends by itself
    env.update(extra)
    return env


def run_pytest(root: Path, *args: str, env: dict | None = None, input: str = "") -> subprocess.CompletedProcess:
    """`pytest exercises ARGS` in the course, as a learner runs it (`input` on its standard input)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "exercises", *args], cwd=root,
                          env=env or learner_env(), capture_output=True, text=True, timeout=300, input=input)


def log(root: Path) -> str:
    path = served_runs.log_path(root)
    return path.read_text(encoding="utf-8") if path.exists() else ""


def wait_until(condition, what: str, seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def logged(root: Path, text: str) -> bool:
    """Whether the warm process logged `text`, waiting for it: a run's line comes after its answer."""
    try:
        wait_until(lambda: text in log(root), "", seconds=30)
    except AssertionError:
        return False
    return True


def listening_pids(root: Path) -> list[int]:
    return [int(line.split(" pid ")[1].split(":")[0])
            for line in log(root).splitlines() if "listening for runs" in line]


def ended(pid: int) -> bool:
    """The process's main thread is gone (or a zombie): its log is all written. (`served_runs.listening`
    is no such sign: a process that stopped accepting also answers no once its backlog is full.)"""
    if not Path("/proc/self/stat").exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.fixture
def course(fake_course):
    """The fake course, its warm processes ended after the test."""
    root = fake_course.pytester.path
    yield fake_course
    served_runs.stop_warm_process(root)
    time.sleep(0.5)
    for pid in listening_pids(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    served_runs.log_path(root).unlink(missing_ok=True)


def warm(root: Path) -> None:
    wait_until(lambda: served_runs.listening(root), f"no warm process listened:\n{log(root)}")


RIGHT_DOUBLE = "def double(x):\n    return x + x\n"


def left_warm(course, double: str | None = None) -> Path:
    """The fake course's graded tests (and `double`, given) run once in a process of their own,
    and the warm process that run left listening: the course root."""
    root = course.pytester.path
    course.test_file(GRADED_TEST)
    if double is not None:
        course.write("exercises", "double", double)
    run_pytest(root)
    warm(root)
    return root


def test_the_next_run_is_answered_by_the_warm_process_the_last_left_with_the_learners_edits(course):
    root = course.pytester.path
    course.test_file(GRADED_TEST)
    first = run_pytest(root)
    assert first.returncode == 1 and "2 todo" in first.stdout, first.stdout  # the stub
    warm(root)
    course.write("exercises", "double", RIGHT_DOUBLE)
    second = run_pytest(root)
    assert second.returncode == 0 and "2 passed" in second.stdout, second.stdout + second.stderr
    assert "done  double" in second.stdout  # the course's summary, on the client's stdout
    assert logged(root, "run 1: pytest -p no:cacheprovider exercises exited 0"), log(root)
    assert state.read(root)["exercises"]["ch11.double"]["status"] == "done"
    course.write("exercises", "double", "def double(x):\n    return x * 3\n")
    third = run_pytest(root)
    assert third.returncode == 1 and "2 failed" in third.stdout, third.stdout
    assert logged(root, "run 2: pytest -p no:cacheprovider exercises exited 1"), log(root)
    assert state.read(root)["exercises"]["ch11.double"]["status"] != "done"
    # failing again, another way (pytest keeps the failure's exception type in sys.last_type)
    course.write("exercises", "double", "def double(x):\n    raise ValueError('not this way')\n")
    fourth = run_pytest(root)
    assert fourth.returncode == 1 and logged(root, "run 3: pytest -p no:cacheprovider exercises exited 1"), log(root)
    assert "this process ends" not in log(root), log(root)
    assert len(listening_pids(root)) == 1  # one warm process answered them all
    assert served_runs.stop_warm_process(root) and logged(root, "asked to stop: this process ends")


def test_a_served_runs_debugger_reads_the_clients_standard_input(course):
    root = left_warm(course, RIGHT_DOUBLE)
    course.test_file("def test_stops_here():\n    answer = 6 * 7\n    breakpoint()\n    assert answer == 42\n",
                     name="test_debugged.py")
    result = run_pytest(root, "-k", "stops_here", input="p answer + 1\nc\n")
    assert result.returncode == 0 and "43" in result.stdout, result.stdout
    assert logged(root, "run 1: pytest -p no:cacheprovider exercises -k stops_here exited 0"), log(root)


@pytest.mark.parametrize("args, env", [
    (["--collect-only"], {}),
    ([], {served_runs.ENV: "0"}),
    ([], {"CI": "true"}),
    ([], {"PYTEST_CURRENT_TEST": "tests/test_x.py::test_y (call)"}),
], ids=["collect-only", "TPUCOURSE_WARM=0", "CI", "inside-a-test"])
def test_runs_that_need_a_process_of_their_own_never_reach_the_warm_process(course, args, env):
    root = left_warm(course, RIGHT_DOUBLE)
    result = run_pytest(root, *args, env=learner_env(**env))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " run 1:" not in log(root), log(root)


@pytest.mark.runs
def test_a_run_on_a_tpu_leaves_no_warm_process_to_hold_the_chip(course):
    root = course.pytester.path
    course.pytester.makeconftest(FAKE_TPU_CONFTEST)  # JAX's default backend says tpu
    course.test_file("def test_nothing():\n    pass\n")
    result = run_pytest(root)
    assert result.returncode == 0, result.stdout + result.stderr
    time.sleep(3)  # a warm process would be importing by now
    assert not served_runs.listening(root) and "listening for runs" not in log(root)


def test_a_run_that_patches_a_library_ends_the_warm_process_and_the_next_run_has_its_own(course):
    root = left_warm(course)
    course.write("exercises", "double", "import numpy\n\nnumpy.allclose = lambda *a, **k: True\n\n\n"
                                        + RIGHT_DOUBLE)
    served = run_pytest(root)
    assert served.returncode == 0, served.stdout
    assert logged(root, "this process ends: replaced by the run: numpy.allclose"), log(root)
    wait_until(lambda: not served_runs.listening(root), "the warm process still listens")
    course.write("exercises", "double", RIGHT_DOUBLE)
    fresh = run_pytest(root)
    assert fresh.returncode == 0 and " run 2:" not in log(root), log(root)
    wait_until(lambda: len(listening_pids(root)) == 2, f"no new warm process:\n{log(root)}")


def test_a_client_of_another_key_ends_the_warm_process_and_leaves_its_own(course):
    root = left_warm(course, RIGHT_DOUBLE)
    other = learner_env(TPUCOURSE_OTHER_SETTING="1")  # what the processes' imports may read differs
    result = run_pytest(root, env=other)
    assert result.returncode == 0 and " run 1:" not in log(root), log(root)
    assert logged(root, "a client of another key"), log(root)
    wait_until(lambda: len(listening_pids(root)) == 2, f"no new warm process:\n{log(root)}")
    again = run_pytest(root, env=other)
    assert again.returncode == 0 and logged(root, " run 1:"), log(root)


def test_ctrl_c_at_the_client_interrupts_the_served_run_and_a_busy_process_is_not_waited_for(course):
    root = left_warm(course)
    started = root / "started"
    course.write("exercises", "double", f"import time\n\n\ndef double(x):\n"
                                        f"    open({str(started)!r}, 'w').close()\n    time.sleep(120)\n")
    # `python -m pytest -p no:cacheprovider exercises`, with Python's own SIGINT handling
    client = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT + "import sys, runpy; "
                               "sys.argv = ['pytest', '-p', 'no:cacheprovider', 'exercises']; "
                               "runpy.run_module('pytest', run_name='__main__', alter_sys=True)"],
                              cwd=root, env=learner_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        wait_until(started.exists, "the served run never reached the learner's function")
        busy = run_pytest(root, "-k", "nothing_is_named_so")  # the warm process is busy: this runs here
        assert busy.returncode == 5, busy.stdout
        os.kill(client.pid, signal.SIGINT)  # what Ctrl-C in the client's terminal does
        out, _ = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 2, out
    assert "KeyboardInterrupt" in out and "Traceback" not in out, out
    wait_until(lambda: not served_runs.listening(root), "the interrupted warm process still listens")
    state.read(root)  # still a whole state file


# A graded function that cannot be stopped (a sleep in C, as a compiled loop would be), in a module that
# holds the warm process's log line of the run back until its client has had its answer and left (the
# warm process's thread that hears the client has ended): the order a loaded machine may give, forced.
DOUBLE_THAT_HANGS_AND_A_CLIENT_THAT_LEAVES_FIRST = """
import sys
import threading
import time

warm_process = sys.modules["__main__"]  # python -m pytest_tpucourse.learner.warm_process
assert hasattr(warm_process, "WarmProcess"), "not run by a warm process"
_log = warm_process.log


def _log_once_the_client_left(course_root, line):
    waited = time.monotonic() + 30
    while time.monotonic() < waited and any(thread.name == "tpucourse-warm-interrupts" and thread.is_alive()
                                            for thread in threading.enumerate()):
        time.sleep(0.01)
    waited = time.monotonic() + 1  # a SIGINT its leaving sent is handled by now, here
    while time.monotonic() < waited:
        time.sleep(0.01)
    _log(course_root, line)


warm_process.log = _log_once_the_client_left


def double(x):
    time.sleep(60)
"""


def test_a_run_that_ends_the_warm_process_itself_is_logged_though_its_client_left_first(course):
    """A graded call that cannot be stopped keeps its thread running: the run answers its client and
    ends the process, which logs the run first. The client leaves as soon as it has its answer, and its
    leaving is no Ctrl-C: heard as one, it raised KeyboardInterrupt in the run's pytest_unconfigure, the
    process did not end, and its log said "exited 3; this process ends: the run ended with exit code 3"
    (issue 55: one CI run in a few, where the client left before the line was written)."""
    root = left_warm(course)
    course.write("exercises", "double", DOUBLE_THAT_HANGS_AND_A_CLIENT_THAT_LEAVES_FIRST)
    served = run_pytest(root, "--kernel-timeout", "1")
    assert served.returncode == 1 and "did not finish within 1 s" in served.stdout, served.stdout + served.stderr
    expected = ("run 1: pytest -p no:cacheprovider exercises --kernel-timeout 1 exited 1; this process ends: "
                "a graded call that passed its deadline is still running")
    assert logged(root, expected), log(root) + served.stderr
    [pid] = listening_pids(root)
    wait_until(lambda: ended(pid), f"the warm process did not end:\n{log(root)}")
    # the run's one line, not a second for the same run (a KeyboardInterrupt raised once the first was written)
    lines = [line.split(": ", 1)[1] for line in log(root).splitlines() if ": run 1: pytest " in line]
    assert len(lines) == 1 and lines[0].startswith(expected), log(root) + served.stderr
    wait_until(lambda: not served_runs.listening(root), "the warm process still listens")


def test_a_warm_process_ends_after_its_idle_time(course):
    root = course.pytester.path
    course.test_file(GRADED_TEST)
    run_pytest(root, env=learner_env(**{served_runs.IDLE_ENV: "1"}))
    wait_until(lambda: "no run for 1 s: this process ends" in log(root), f"still waiting:\n{log(root)}")
    assert not served_runs.listening(root)


# ------------------------------------------------------------------------- without processes

def _config(root: Path, args=("exercises/ch11",), **options) -> SimpleNamespace:
    defaults = dict(gates=False, rehearse=False, isolated=False, collectonly=False, help=False, version=False,
                    showfixtures=False, show_fixtures_per_test=False, markers=False, tpucourse_results=None,
                    watch_run=None, numprocesses=None, dist="no", cpu_devices=8, jax_cache=".tpucourse/jax-cache")
    return SimpleNamespace(option=SimpleNamespace(**{**defaults, **options}), rootpath=root, args=list(args),
                           invocation_params=SimpleNamespace(dir=root, plugins=()))


@pytest.mark.parametrize("options", [dict(gates=True), dict(gates=True, rehearse=True), dict(isolated=True),
                                     dict(collectonly=True), dict(version=True), dict(tpucourse_results="r.json"),
                                     dict(watch_run="token"), dict(numprocesses=2), dict(dist="load")])
def test_a_run_with_options_that_need_their_own_process_is_not_handed_over(tmp_path, monkeypatch, options):
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "course.toml").write_text("[course]\n")
    (tmp_path / "elsewhere").mkdir()
    for name in ("CI", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", served_runs.ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["/home/learner/.venv/bin/pytest", "exercises/ch11"])
    assert served_runs.why_not_served(_config(tmp_path / "course")) is None
    assert served_runs.why_not_served(_config(tmp_path / "course", **options)).startswith("asked for ")
    assert served_runs.why_not_served(_config(tmp_path / "elsewhere")) == "not a course checkout"
    # the course's own test suite, or a file outside exercises/: a run of its own
    assert served_runs.why_not_served(_config(tmp_path / "course", args=["tests"])) == \
        "tests is not a graded test of exercises/"
    assert served_runs.why_not_served(_config(tmp_path / "course", args=["exercises/ch11/test_x.py::test_y"])) is None
    # a program that calls pytest.main() (with plugins of its own, or at all) keeps its run
    called = _config(tmp_path / "course")
    called.invocation_params.plugins = (object(),)
    assert served_runs.why_not_served(called).startswith("pytest.main() called from another program")
    monkeypatch.setattr(sys, "argv", ["bench/grading_split.py", "exercises/ch11"])
    assert served_runs.why_not_served(_config(tmp_path / "course")).startswith("pytest.main() called")
    monkeypatch.setattr(sys, "argv", ["/usr/lib/python3/site-packages/pytest/__main__.py"])
    assert served_runs.why_not_served(_config(tmp_path / "course")) is None


def test_the_key_changes_with_the_environment_the_imports_read_and_not_with_the_rest(tmp_path):
    base = {"HOME": "/home/learner"}
    key = served_runs.process_key(tmp_path, base)
    assert served_runs.process_key(tmp_path, {**base, "COLUMNS": "80", "WINDOWID": "7"}) == key
    for name in ("JAX_PLATFORMS", "XLA_FLAGS", "PYTHONPATH", "TPUCOURSE_WATCH_RUNS", "LD_LIBRARY_PATH"):
        assert served_runs.process_key(tmp_path, {**base, name: "x"}) != key, name
    assert served_runs.process_key(tmp_path / "other", base) != key


def test_between_runs_the_checkouts_modules_are_forgotten_and_the_rest_kept(tmp_path, monkeypatch):
    root = tmp_path / "course"
    names = {"learners": root / "exercises" / "ch11" / "matmul.py", "elsewhere": tmp_path / "lib" / "x.py"}
    for name, path in names.items():
        module = types.ModuleType(f"_served_runs_test_{name}")
        module.__file__ = str(path)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    folder = types.ModuleType("_served_runs_test_folder")  # a namespace package pytest made for a folder
    folder.__path__ = [str(root / "exercises")]
    monkeypatch.setitem(sys.modules, folder.__name__, folder)
    monkeypatch.setitem(sys.modules, "_tpucourse_graded_exercises_0123456789", types.ModuleType("graded"))
    warm_process.forget_course_modules(root.resolve())
    assert "_served_runs_test_learners" not in sys.modules and "_served_runs_test_folder" not in sys.modules
    assert "_tpucourse_graded_exercises_0123456789" not in sys.modules
    assert "_served_runs_test_elsewhere" in sys.modules


def test_a_function_replaced_by_code_outside_the_package_is_found(tmp_path, monkeypatch):
    from pytest_tpucourse.grading import backend

    module = types.ModuleType("_served_runs_test_library")
    module.__file__ = str(tmp_path / "library.py")
    module.compute = lambda x: x
    module.count = 1
    monkeypatch.setitem(sys.modules, module.__name__, module)
    before = warm_process.ModuleFunctions.now()
    module.count = 2  # data a run may change
    assert before.replaced(tmp_path / "course") == []
    module.compute = backend.select  # this package's own installs are its runs' own
    assert before.replaced(tmp_path / "course") == []
    module.compute = lambda x: x + 1
    assert before.replaced(tmp_path / "course") == ["_served_runs_test_library.compute"]


def test_a_warm_process_stops_waiting_once_its_checkout_is_gone(tmp_path, monkeypatch):
    import socket

    monkeypatch.setattr(warm_process, "CHECKOUT_LOOK_SECONDS", 0.1)
    root = tmp_path / "course"
    root.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "warm.sock"))
    listener.listen(1)
    with listener:
        with pytest.raises(socket.timeout):  # idle: no client within its time
            warm_process._next_client(listener, root, 0.3)
        root.rmdir()
        assert warm_process._next_client(listener, root, 30) is None


def _request(key: str, backend: dict) -> dict:
    return {"key": key, "args": ["exercises"], "cwd": "/", "env": {}, "argv": ["pytest"], "backend": backend,
            "encodings": [["utf-8", "strict"]] * 3}


@pytest.mark.parametrize("go", [True, False], ids=["the client says go", "the client gave up"])
def test_a_warm_process_runs_a_request_only_once_its_client_says_go(tmp_path, monkeypatch, go):
    """A client that waited too long for the accept runs the tests itself: the warm process, which may
    have accepted meanwhile, must not run them as well (both would write the same state and records)."""
    import socket
    import threading

    monkeypatch.setattr(warm_process, "REQUEST_SECONDS", 2.0)
    served, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    process = warm_process.WarmProcess(tmp_path, "k", {"cpu_devices": 8}, dict(os.environ))
    ran = []
    monkeypatch.setattr(process, "run", lambda request, fds, connection: ran.append(request["args"]) or 0)
    monkeypatch.setattr(process, "after_run", lambda code: [])
    answered = []
    server = threading.Thread(target=lambda: answered.append(process.answer(served)))
    server.start()
    messages = served_runs.Messages(client)
    assert messages.next()["key"] == "k"
    served_runs.send_message(client, _request("k", {"cpu_devices": 8}), fds=[0, 1, 2])
    assert messages.next() == {"accepted": True}
    if go:
        served_runs.send_message(client, {served_runs.GO: True})
        assert messages.next() == {"exit": 0}
    client.close()
    server.join(10)
    assert ran == ([["exercises"]] if go else [])
    assert answered == [False]
    assert go or "a client gave up before its run began: nothing ran here" in log(tmp_path)


def test_a_client_whose_request_is_not_accepted_in_time_runs_here_and_says_no_go(tmp_path, monkeypatch):
    """The client's side of the same agreement: no accept within ACCEPT_SECONDS, and it runs the tests
    itself, having sent no GO."""
    import socket

    monkeypatch.setattr(served_runs, "ACCEPT_SECONDS", 0.2)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = tmp_path / "warm.sock"
    listener.bind(str(path))
    listener.listen(1)
    monkeypatch.setattr(served_runs, "why_not_served", lambda config: None)
    monkeypatch.setattr(served_runs, "course_root_of", lambda config: tmp_path)
    monkeypatch.setattr(served_runs, "socket_path", lambda root: path)
    monkeypatch.setattr(served_runs, "process_key", lambda root: "k")
    monkeypatch.setattr(served_runs, "_terminal_as_given", lambda config: None)
    config = _config(tmp_path)
    config.invocation_params.args = ("exercises",)
    import threading

    heard = []

    def slow_warm_process():
        connection, _ = listener.accept()
        with connection:
            messages = served_runs.Messages(connection)
            served_runs.send_message(connection, {"key": "k", "pid": 1})
            heard.append(messages.next(with_fds=3)["key"])
            time.sleep(0.5)  # past the client's wait
            try:
                served_runs.send_message(connection, {"accepted": True})
                heard.append(messages.next())
            except OSError:
                heard.append("closed")

    warm_side = threading.Thread(target=slow_warm_process)
    warm_side.start()
    with listener:
        assert served_runs.serve_run(config) is None  # run here
        warm_side.join(10)
    assert heard in (["k", None], ["k", "closed"])  # the client sent no GO


@pytest.mark.parametrize("crash", ["internalerror", "raised"])
def test_a_served_run_that_ends_in_exit_code_3_leaves_its_own_account_in_the_log(tmp_path, monkeypatch, crash):
    """pytest's INTERNALERROR lines, or the traceback of what the run raised, went only to the client's
    terminal, which may be gone (a test's captured output): the log keeps them, under the run's line."""
    import socket
    import threading

    def crashing_main(args):
        print("collected 2 items")
        if crash == "raised":
            raise RuntimeError("the run's own crash")
        print("INTERNALERROR> Traceback (most recent call last):\nINTERNALERROR> ValueError: a hook's mistake")
        return pytest.ExitCode.INTERNAL_ERROR

    monkeypatch.setattr(pytest, "main", crashing_main)
    process = warm_process.WarmProcess(tmp_path, "k", {"cpu_devices": 8}, dict(os.environ))
    monkeypatch.setattr(process, "after_run", lambda code: [f"the run ended with exit code {code}"])
    served, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read_end, write_end = os.pipe()
    heard, answered = [], threading.Event()

    def the_client():  # leaves only once the run is answered and over
        messages = served_runs.Messages(client)
        messages.next()
        request = {**_request("k", {"cpu_devices": 8}), "env": dict(os.environ), "cwd": os.getcwd()}
        served_runs.send_message(client, request, fds=[0, write_end, write_end])
        messages.next()
        served_runs.send_message(client, {served_runs.GO: True})
        heard.append(messages.next())
        answered.wait(30)
        client.close()

    client_side = threading.Thread(target=the_client)
    client_side.start()
    try:
        assert process.answer(served) is True  # the run's own thread: the terminal and SIGINT are this one's
    finally:
        answered.set()
        client_side.join(10)
        served.close()
        os.close(write_end)
    with os.fdopen(read_end, encoding="utf-8") as terminal:
        shown = terminal.read()
    assert heard == [{"exit": 3}]
    assert "collected 2 items" in shown  # the client's terminal had it all the same
    written = log(tmp_path)
    assert "run 1: pytest exercises exited 3; this process ends: the run ended with exit code 3" in written, written
    assert "run 1: the end of its output:\n    | collected 2 items\n" in written, written
    if crash == "raised":
        assert "tpucourse: the warm process's run failed: RuntimeError: the run's own crash" in shown, shown
        assert f"(its traceback: {served_runs.log_path(tmp_path)})" in shown
        assert "run 1: what it raised:\n    | Traceback (most recent call last):" in written, written
        assert "    | RuntimeError: the run's own crash" in written, written
    else:
        assert "    | INTERNALERROR> ValueError: a hook's mistake" in written, written
        assert "what it raised" not in written
    served_runs.log_path(tmp_path).unlink()
