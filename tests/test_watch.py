"""tpucourse watch: a save re-runs the tests it concerns, said at once; then how the exercise
stands and what is next; a run that dies does not take the watcher down."""

import os
import signal
import subprocess
import sys
import threading
import time

from pytest_tpucourse.learner import state

from .support import DEFAULT_SIGINT, GRADED_TEST

WATCH = [sys.executable, "-m", "pytest_tpucourse.commands.main", "watch"]
NO_CACHE = "--pytest-args=-p no:cacheprovider"


class Watcher:
    """A watcher child; its output read as it comes."""

    def __init__(self, root, *args, command=WATCH):
        # A session of its own: Ctrl-C in a terminal reaches the watcher and its run together.
        self.process = subprocess.Popen([*command, *args, NO_CACHE], cwd=root, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, count: int = 1, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while self.out.count(text) < count:
            assert time.monotonic() < deadline and self.process.poll() is None, self.out
            time.sleep(0.1)

    def finish(self, seconds: float = 90) -> int:
        code = self.process.wait(seconds)
        self.reader.join(5)
        return code


def test_one_run_of_a_chapter_names_the_exercise_and_the_hint_command(fake_course):
    fake_course.test_file(GRADED_TEST)
    done = subprocess.run([*WATCH, "ch11", "--max-runs", "1", NO_CACHE],
                          cwd=fake_course.pytester.path, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert "watch: running exercises/ch11\n" in out
    assert "1 todo" in out  # -x: the first TODO stops the run
    assert "watch: ch11.double is not written yet: double() in exercises/ch11/double.py is not written yet." in out
    assert "  edit exercises/ch11/double.py; stuck? tpucourse hint ch11.double" in out
    assert done.returncode == 1


def test_a_save_reruns_only_its_exercise_and_says_so_at_once(fake_course):
    fake_course.test_file(GRADED_TEST)
    fake_course.test_file(GRADED_TEST.replace("def test_double(", "def test_double_thrice("), "test_other.py")
    root = fake_course.pytester.path
    watcher = Watcher(root, "--max-runs", "3")  # no target: the next exercise, ch11.double
    watcher.wait_for("waiting for changes")
    assert "watch: running test_double.py\n" in watcher.out
    assert "each run forked from this warm process" in watcher.out
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    watcher.wait_for("changed: exercises/ch11/double.py, running test_double.py\n")
    watcher.wait_for("waiting for changes", 2)
    assert "2 passed" in watcher.out  # test_double.py's two tests, not test_other.py's
    assert "watch: ch11.double is done\nnext: every shipped exercise is done\n" in watcher.out
    fake_course.write("exercises", "helpers", "SCALE = 2\n")  # no exercise owns it: the chapter
    watcher.wait_for("changed: exercises/ch11/helpers.py, running exercises/ch11\n")
    assert watcher.finish() == 0, watcher.out
    assert "4 passed" in watcher.out
    assert "watch: every exercise of ch11 is done" in watcher.out


def test_a_run_that_dies_leaves_the_watcher_watching(fake_course):
    fake_course.test_file(GRADED_TEST)
    watcher = Watcher(fake_course.pytester.path, "ch11.double", "--max-runs", "3")
    watcher.wait_for("waiting for changes")
    fake_course.write("exercises", "double", "import os, signal\n\n\ndef double(x):\n"
                      "    os.kill(os.getpid(), signal.SIGKILL)\n")
    watcher.wait_for("changed: exercises/ch11/double.py, running test_double.py")
    watcher.wait_for("waiting for changes", 2)
    assert "watch: the run was killed by SIGKILL before it ended; the watch goes on" in watcher.out
    fake_course.write("exercises", "double", "def double(x):\n    return x + x\n")
    assert watcher.finish() == 0, watcher.out
    assert "watch: ch11.double is done" in watcher.out


def test_ctrl_c_during_a_run_stops_the_run_and_the_watch(fake_course):
    fake_course.test_file(GRADED_TEST)
    # Python's own SIGINT handling, even where this suite runs with SIGINT ignored
    command = [sys.executable, "-c", DEFAULT_SIGINT + "import sys; from pytest_tpucourse.commands import main; "
               "sys.exit(main.main(sys.argv[1:]))", "watch"]
    watcher = Watcher(fake_course.pytester.path, "ch11.double", command=command)
    watcher.wait_for("waiting for changes")
    started = fake_course.pytester.path / "started"
    fake_course.write("exercises", "double", f"import time\n\n\ndef double(x):\n"
                      f"    open({str(started)!r}, 'w').close()\n    time.sleep(120)\n")
    deadline = time.monotonic() + 60
    while not started.exists():  # the run is inside the learner's function
        assert time.monotonic() < deadline, watcher.out
        time.sleep(0.1)
    os.killpg(watcher.process.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    start = time.monotonic()
    watcher.finish(60)
    assert time.monotonic() - start < 20, watcher.out
    assert "KeyboardInterrupt" in watcher.out and "Traceback" not in watcher.out
    assert "  ----  double             not run (the run ended before its 2 tests finished)" in watcher.out
    state.read(fake_course.pytester.path)  # still a whole state file
