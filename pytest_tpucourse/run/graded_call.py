"""The graded call: each test's call phase, seen from outside every other plugin's wrapper.

One wrapper (tryfirst, so the outermost) holds the call. It records how the call ended (a
pass counts only where the test returned here, docs/earned.md) and restores the course's
checks if graded code changed them; inside it the test runs under its conditions: a graded
property test draws the examples of its graded file (`seed_examples`), in the dev profile
over the cases its explicit examples compiled, and a test marked kernel_timeout(s) gives its
graded calls at most s seconds (deadlock tests). Between tests, a fork graded code left is
ended and a Ctrl-C that JAX swallowed stops the run.
"""

from __future__ import annotations

import hashlib

import pytest

from ..core import profiles
from ..core.outcomes import LearnerCodeError
from ..gates import markers
from ..grading import leftovers
from ..grading.interrupts import CTRL_C
from ..learner import state
from .session import CALL_SEEN, SESSION, CourseSession


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item):
    seconds = markers.kernel_timeout(item)
    session = item.config.stash.get(SESSION, None)
    if session is None:
        return (yield)
    seen = "raised"
    session.grading.provenances.clear()  # each test walks its graded functions afresh
    try:
        seed_examples(session, item)
        with profiles.drawing_for(getattr(item, "obj", None)):
            if seconds is None:
                result = yield
            else:
                with session.grading.deadline.at_most(seconds, "this test's kernel_timeout marker"):
                    result = yield
        seen = "returned"
        return result
    except BaseException as error:
        seen = f"raised {type(error).__name__}"
        raise
    finally:
        leftovers.end_forked_child()
        _count_modules_used(session, item.nodeid)
        item.stash[CALL_SEEN] = session.calls_seen[item.nodeid] = seen
        graded = "impl" in getattr(item, "fixturenames", ()) or session.progress.exercise_of(item.nodeid)
        changed = session.guard.restore_changed() if graded else []
        if changed and seen == "returned":
            session.calls_seen[item.nodeid] = item.stash[CALL_SEEN] = "raised LearnerCodeError"
            raise LearnerCodeError(
                f"the course's checks were changed while this test ran ({', '.join(changed[:5])}): graded "
                f"code may not change the course's code, so the test fails; they are restored for the "
                f"tests that follow.")


def _count_modules_used(session: CourseSession, nodeid: str) -> None:
    """The graded modules this test used belong to its exercise's unit (grading/unit_files.py):
    chapter 13's causal_skipping is graded through forward.py."""
    exercise = session.progress.exercise_of(nodeid)
    if exercise is not None:
        session.grading.exercise_modules.setdefault(exercise.key, set()).update(session.grading.touched)
    session.grading.touched.clear()


def pytest_runtest_logfinish(nodeid, location) -> None:
    leftovers.end_forked_child()
    CTRL_C.check()  # a Ctrl-C that JAX swallowed during the test stops the run now


def pytest_keyboard_interrupt(excinfo) -> None:
    CTRL_C.handled()


def seed_examples(session: CourseSession, item: pytest.Item) -> None:
    """A graded property test draws the same examples, run after run, until the graded
    module of its exercise changes: a fix is judged on the cases that failed before it
    (hypothesis' example database replays those first), and a new version of the file
    gets new cases. The seed is the test's id and the module's contents; --hypothesis-seed
    given on the command line wins."""
    test = getattr(item, "obj", None)
    test = getattr(test, "__func__", test)
    exercise = session.progress.exercise_of(item.nodeid)
    if (exercise is None or not getattr(test, "is_hypothesis_test", False)
            or item.config.getoption("hypothesis_seed", None) is not None):
        return
    from hypothesis import seed

    module = session.tree.module_path(exercise.chapter, exercise.name)
    digest = hashlib.sha256(item.nodeid.encode() + (state.file_digest(module) or "").encode()).hexdigest()
    seed(int(digest[:16], 16))(test)
