"""The objects a run's start made leave the garbage collector's walks; later ones do not."""

import subprocess
import sys
import textwrap

FREEZE_THEN_COLLECT = """
    import gc
    import weakref

    from pytest_tpucourse.core import startup_heap

    class Node:
        pass

    before = Node(); before.me = before  # a cycle made before: set aside with the rest
    kept_before = weakref.ref(before); del before
    startup_heap.set_aside()
    frozen = gc.get_freeze_count()
    after = Node(); after.me = after  # a cycle made after: collected as before
    kept_after = weakref.ref(after); del after
    startup_heap.set_aside()  # once per process
    gc.collect()
    print(frozen > 1000, gc.get_freeze_count() == frozen, kept_before() is not None, kept_after() is None)
"""


def test_a_cycle_made_after_the_start_is_still_collected():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FREEZE_THEN_COLLECT)], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == ["True"] * 4, done.stdout + done.stderr


def test_a_course_run_sets_its_start_aside(fake_course):
    fake_course.test_file("""
        import gc

        def test_the_start_is_set_aside():
            assert gc.get_freeze_count() > 10_000  # pytest, JAX and the plugin, imported before the session
    """, name="test_heap.py")
    fake_course.run("exercises/ch11/test_heap.py").assert_outcomes(passed=1)
