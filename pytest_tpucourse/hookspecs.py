"""Extension points of the plugin (pluggy hook specifications).

Implement them in a conftest.py or an installed plugin. Example, a chip the
package does not ship:

    from pytest_tpucourse.chips import Chip

    def pytest_tpucourse_register_chips():
        return [Chip("mychip", "tpu", peak_flops=4e14, hbm_bandwidth=1.5e12, hbm_bytes=32e9,
                     device_kinds=("TPU my chip",))]

Its name is then accepted by --chip and @pytest.mark.roofline(chip=...), and a
device whose jax device_kind is listed is detected as it.
"""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_tpucourse_register_chips():
    """Return an iterable of `pytest_tpucourse.chips.Chip` to add to the registry."""


@pytest.hookspec(firstresult=True)
def pytest_tpucourse_device(config):
    """Return (platform, device_kind) of the device gate tests run on, or None for JAX's own.

    platform is what jax.default_backend() says ("cpu", "gpu", "tpu"). The first
    non-None result wins. Measured records are written only for an accelerator
    platform; a plugin that answers this hook vouches for the hardware.
    """
