"""Extension points of the plugin (pluggy hook specifications).

Implement them in a conftest.py or an installed plugin. Example, a chip the
package does not ship:

    from pytest_tpucourse.chips import Chip

    def pytest_tpucourse_register_chips():
        return [Chip("mychip", "tpu", peak_flops=4e14, hbm_bandwidth=1.5e12, hbm_bytes=32e9,
                     device_kinds=("TPU my chip",))]

Its name is then accepted by --chip (pytest's and the `tpucourse` commands') and
@pytest.mark.roofline(chip=...), and a device whose jax device_kind is listed is detected
as it. A TPU that the real compiler should compile for also gives `compile_topology` (and
`jax_version`, the pltpu.ChipVersion its lowering rules take; without it, that of the
built-in chip with the same topology family); `dataclasses.replace(chips.get_chip("v5e"),
name="my-v5e", ...)` keeps every fact of the chip it starts from.

No hook names the device: what gate tests run on is what `jax.devices()` reports,
read once when the run starts. A plugin answering the retired `pytest_tpucourse_device`
is refused with a usage error (`refuse_retired`), since a hook that can name the device
could turn a CPU run into measured rows. Its name stays known to pluggy (`Retired`) only
so that the refusal is that short message rather than pluggy's "unknown hook" traceback;
nothing ever calls it.
"""

from __future__ import annotations

import pytest

RETIRED = {"pytest_tpucourse_device": "the device gate tests run on is what jax.devices() reports; "
                                      "no hook can name it (a hook that could would turn a CPU into a TPU)"}


@pytest.hookspec
def pytest_tpucourse_register_chips():
    """Return an iterable of `pytest_tpucourse.chips.Chip` to add to the registry."""


class Retired:
    """Hook names that are no longer extension points; implementing one is a usage error."""

    @staticmethod
    @pytest.hookspec(firstresult=True)
    def pytest_tpucourse_device(config):
        """Retired: never called. The device is what jax.devices() reports."""


def refuse_retired(plugin, name: str | None = None) -> None:
    """A usage error for a plugin (a conftest.py, say) that implements a retired hook."""
    for hook, why in RETIRED.items():
        if hasattr(plugin, hook):
            where = getattr(plugin, "__file__", None) or name or repr(plugin)
            raise pytest.UsageError(f"{where} defines {hook}, which is not a hook of pytest-tpucourse: {why}. "
                                    f"Remove it.")
