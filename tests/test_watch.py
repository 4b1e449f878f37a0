"""tpucourse watch: one run per change under exercises/, then the first unfinished exercise and its hint."""

import subprocess
import sys
import threading
import time

from .test_state import GRADED_TEST

WATCH = [sys.executable, "-m", "pytest_tpucourse.cli", "watch"]


def test_one_run_names_the_exercise_and_the_hint_command(fake_course):
    fake_course.test_file(GRADED_TEST)
    done = subprocess.run([*WATCH, "ch11", "--max-runs", "1", "--pytest-args=-p no:cacheprovider"],
                          cwd=fake_course.pytester.path, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert "watch: pytest exercises/ch11 -x -p no:cacheprovider" in out
    assert "1 todo" in out  # -x: the first TODO stops the run
    assert "watch: ch11.double is not written yet: double() in exercises/ch11/double.py is not written yet." in out
    assert "  edit exercises/ch11/double.py; stuck? tpucourse hint ch11.double" in out
    assert done.returncode == 1


def test_a_change_under_exercises_triggers_the_next_run(fake_course):
    fake_course.test_file(GRADED_TEST)
    root = fake_course.pytester.path
    watcher = subprocess.Popen([*WATCH, "--max-runs", "2", "--pytest-args=-p no:cacheprovider"], cwd=root,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []

    def read():
        for line in watcher.stdout:
            seen.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 90
    while not any("waiting for changes" in line for line in seen):
        assert time.monotonic() < deadline and watcher.poll() is None, "".join(seen)
        time.sleep(0.2)
    fake_course.write("exercises", "double", "def double(x):\n    return x * 2\n")
    assert watcher.wait(90) == 0, "".join(seen)
    reader.join(5)
    out = "".join(seen)
    assert out.count("watch: pytest exercises/ch11 -x") == 2
    assert "2 passed" in out
    assert "watch: every exercise of ch11 is done; `tpucourse progress` shows what is next" in out
