"""The fixtures graded tests take besides the gate tests' (gate_tests.py): `impl` and `mesh`."""

from __future__ import annotations

import pytest

from ..grading.tree import Implementation
from .session import SESSION


@pytest.fixture(scope="module")
def impl(request: pytest.FixtureRequest):
    """The graded tree's modules for this test file's chapter: `impl.matmul.matmul(x, y)`."""
    session = request.config.stash.get(SESSION, None)
    if session is None:
        pytest.fail("the impl fixture works only inside a course checkout (course.toml)", pytrace=False)
    chapter = session.course.chapter_of_path(request.path)
    if chapter is None:
        pytest.fail(f"{request.path}: impl grades files under exercises/chNN/ of a chapter in course.toml",
                    pytrace=False)
    return Implementation(session.tree, session.course, chapter.id, session.grading)


@pytest.fixture(scope="session")
def mesh(request: pytest.FixtureRequest):
    """A factory of 1-D device meshes: mesh(4) spans the first 4 devices, axis "x".

    Off an accelerator the devices are the simulated CPU devices (--cpu-devices); on a
    TPU, the real chips. A test asking for more devices than the run has is skipped,
    saying how many it needs. A test marked @pytest.mark.devices(n) builds meshes of at most n
    devices; on a TPU host with fewer chips it runs on the host's CPU devices instead
    (grading/placement.py). Axes are Auto, so shard_map places its inputs itself.
    The factory holds no state, so it is session-scoped: hypothesis' @given tests may
    use it (a function-scoped fixture fails their health check).
    """
    session = request.config.stash.get(SESSION, None)

    def factory(n: int, axis: str = "x"):
        import jax
        from jax.sharding import AxisType

        from ..core.running_test import current_test

        declared = None if session is None else session.devices_declared.get(current_test())
        if declared is not None and n > declared:
            pytest.fail(f"mesh({n}) in a test marked @pytest.mark.devices({declared}): the marker names the "
                        f"largest mesh the test builds (run/placement.py places the test by it)", pytrace=False)
        available = jax.devices()
        if n > len(available):
            where = (f"{len(available)} {available[0].platform} device(s)" if available[0].platform != "cpu"
                     else f"{len(available)} CPU device(s) (--cpu-devices)")
            pytest.skip(f"needs {n} devices; this run has {where}")
        return jax.make_mesh((n,), (axis,), devices=available[:n], axis_types=(AxisType.Auto,))
    return factory
