"""The chips a run knows: the built-in ones and those plugins register through the
`pytest_tpucourse_register_chips` hook (hookspecs.py).

Inside pytest the run's config answers the hook (`from_config`, read once by RunOptions).
The `tpucourse` commands run outside pytest, so `named` asks pytest for the same answer: it
parses pytest's configuration in the current folder as a run started there would (the
installed plugins, `-p` in the ini's addopts, PYTEST_PLUGINS, the conftest.py files pytest
loads before collecting), and asks the hook, running nothing. A built-in name needs none of
that and is answered from the chip table at once.
"""

from __future__ import annotations

import pytest

from .. import chips


def from_config(config: pytest.Config) -> chips.ChipRegistry:
    """The built-in chips plus those the config's plugins register; a bad one is a usage error."""
    try:
        return chips.ChipRegistry((chip for found in config.hook.pytest_tpucourse_register_chips()
                                   for chip in found or ()), plugins_asked=True)
    except (TypeError, ValueError) as error:
        raise pytest.UsageError(f"pytest_tpucourse_register_chips: {error}") from None


def here() -> chips.ChipRegistry:
    """The chips a pytest run started in the current folder would know (nothing is run)."""
    from _pytest.config import _prepareconfig  # pytest's own parsing of a command line, plugins and all

    try:
        config = _prepareconfig(["-p", "no:cacheprovider", "--capture=no"])
    except pytest.UsageError as error:
        raise ValueError(f"pytest's configuration here: {error}") from None
    try:
        return from_config(config)
    except pytest.UsageError as error:
        raise ValueError(str(error)) from None
    finally:
        config._ensure_unconfigure()


def named(name: str | None) -> chips.Chip:
    """The chip a command's --chip names (None: the course's default), built in or registered by a
    plugin or conftest here; ValueError naming the known ones otherwise."""
    name = name or chips.DEFAULT_CHIP
    try:
        return chips.get_chip(name)
    except ValueError:
        return here().get(name)
