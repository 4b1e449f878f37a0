"""Hypothesis profiles for graded tests: `--hypothesis-profile dev|ci|thorough`.

Every new array shape recompiles a kernel (0.1-0.7 s under interpret mode), so
the example budgets are small and the strategies draw from few shapes; corner
cases that matter are explicit `@example`s or parametrizations and run on every
profile. No deadline: interpret-mode timings say nothing about the kernel.
The session registers them (`register()`) when a run inside the course starts.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

DEFAULT_PROFILE = "dev"
CI_PROFILE = "ci"

_COMMON = dict(
    deadline=None,
    # One distinct failure is what a learner needs; several at once is noise.
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # No "@reproduce_failure" advice: graded tests are not the learner's to edit; a failed
    # check prints its own reproduction (reproduction.py).
    print_blob=False,
)

# Inputs are built from a drawn seed, so shrinking has little to simplify, and
# each shrink or explain step that picks another shape pays a compile (minutes
# for one failing test). The first failing example is reported as found.
_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def register() -> None:
    """Register dev, ci and thorough with hypothesis."""
    settings.register_profile("dev", max_examples=3, phases=_NO_SHRINK, **_COMMON)
    settings.register_profile(
        "ci", max_examples=6, derandomize=True, database=None, phases=_NO_SHRINK, **_COMMON
    )
    settings.register_profile(
        "thorough", max_examples=60, phases=(*_NO_SHRINK, Phase.shrink), **_COMMON
    )


def default_profile() -> str:
    """The profile used when --hypothesis-profile is not given."""
    return CI_PROFILE if os.environ.get("CI") else DEFAULT_PROFILE
