"""Hypothesis profiles for graded tests: `--hypothesis-profile dev|ci|thorough`.

Every new array shape recompiles a kernel (0.1-0.7 s under interpret mode), so
the example budgets are small and the strategies draw from few shapes; corner
cases that matter are explicit `@example`s or parametrizations and run on every
profile. No deadline: interpret-mode timings say nothing about the kernel.
The session loads one (`load()`) when a run inside the course starts.

In `dev`, a learner's profile, a property test with explicit examples draws its
generated examples over the cases those examples already compiled: new seeds (new
values) on the same shapes, dtypes and settings, so they cost no compile. Each
`strategies.few` or `strategies.dtypes` draw keeps the options an explicit example
of the running test gives its own argument (all of them if none does). `ci` and
`thorough` draw every option: new shapes as well. So what dev grades is what the
explicit examples hold: every rank and axis an exercise accepts belongs in one.

Importing this module loads no hypothesis.
"""

from __future__ import annotations

import contextlib
import os

DEFAULT_PROFILE = "dev"
CI_PROFILE = "ci"
PROFILES = ("dev", "ci", "thorough")

_active: str | None = None  # the profile the session loaded
_explicit_examples: list[dict] = []  # each explicit example of the running test: its values by argument
_arguments: dict[int, str] = {}  # id of a `few` draw's options -> the argument of the running test it draws

# The attribute `strategies.few` marks its strategy with: the options it draws from.
OPTIONS_ATTRIBUTE = "tpucourse_options"


def register() -> None:
    """Register dev, ci and thorough with hypothesis."""
    from hypothesis import HealthCheck, Phase, settings

    common = dict(
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
    no_shrink = (Phase.explicit, Phase.reuse, Phase.generate)
    settings.register_profile("dev", max_examples=3, phases=no_shrink, **common)
    settings.register_profile(
        "ci", max_examples=6, derandomize=True, database=None, phases=no_shrink, **common
    )
    settings.register_profile(
        "thorough", max_examples=60, phases=(*no_shrink, Phase.shrink), **common
    )


def load(profile: str | None) -> str:
    """Register the profiles and load `profile` (the default when None); returns its name."""
    from hypothesis import settings

    global _active
    register()
    name = profile or default_profile()
    settings.load_profile(name)
    _active = name
    return name


def default_profile() -> str:
    """The profile used when --hypothesis-profile is not given."""
    return CI_PROFILE if os.environ.get("CI") else DEFAULT_PROFILE


@contextlib.contextmanager
def drawing_for(test_function):
    """While a test runs: the values of its explicit examples, which dev draws keep to, and
    which argument each of its `few` draws is for (hypothesis keeps @given's strategies by
    name on the test, privately: without them a draw is matched against every value)."""
    global _explicit_examples, _arguments
    examples = getattr(test_function, "hypothesis_explicit_examples", None) or ()
    given = getattr(getattr(test_function, "hypothesis", None), "_given_kwargs", None) or {}
    previous = _explicit_examples, _arguments
    _explicit_examples = [{**{i: value for i, value in enumerate(e.args)}, **e.kwargs} for e in examples]
    _arguments = {id(options): name for name, strategy in given.items()
                  if (options := getattr(strategy, OPTIONS_ATTRIBUTE, None)) is not None}
    try:
        yield
    finally:
        _explicit_examples, _arguments = previous


def follows_examples() -> bool:
    """Whether draws now keep to the running test's explicit examples (dev, a test with some)."""
    return _active == DEFAULT_PROFILE and bool(_explicit_examples)


def options_to_draw(options, example: int | None = None) -> list:
    """The options a `few`-style draw picks from.

    In dev, a test with explicit examples draws what they compiled, with new seeds: the
    option explicit example number `example` (modulo their count) gives this draw's
    argument, so that the draws of one generated example together repeat one explicit
    example's shapes; else those any explicit example gives it; all of them when none
    does. Other profiles draw from all of them. (A draw whose argument is unknown, a
    `few` nested in another strategy, is matched against every value of the example.)
    """
    argument = _arguments.get(id(options))
    options = list(options)
    if not follows_examples():
        return options
    chosen = _explicit_examples if example is None else [_explicit_examples[example % len(_explicit_examples)]]
    for examples in (chosen, _explicit_examples):
        values = [value for example_values in examples for name, value in example_values.items()
                  if argument is None or name == argument]
        used = [option for option in options if any(_same(option, value) for value in values)]
        if used:
            return used
    return options


def _same(option, value) -> bool:
    if option is value:
        return True
    try:
        return type(option) is type(value) and bool(option == value)
    except Exception:  # arrays compare element by element: never one of a few options
        return False
