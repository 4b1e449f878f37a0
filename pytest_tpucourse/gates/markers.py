"""The markers a course test may carry: @pytest.mark.gate(n), @pytest.mark.roofline(...),
@pytest.mark.kernel_timeout(seconds), @pytest.mark.edits(file), and the two that place a test on a
TPU host (run/placement.py): @pytest.mark.host_interpret(what) and @pytest.mark.devices(n)."""

from __future__ import annotations

import pytest

from .. import chips, roofline
from .criteria import gate_range, is_gate_number

GATE_TESTS_SKIPPED = "gate test: runs with --gates"  # the reason of the skip a plain run gives gate tests


def register(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"gate(n): a gate test of stage n ({gate_range()}); runs only with --gates")
    config.addinivalue_line(
        "markers",
        "roofline(chip=None, flops=None, bytes=None): attach a roofline prediction to a benchmark test")
    config.addinivalue_line(
        "markers",
        "kernel_timeout(seconds): a shorter deadline for this test's graded calls than --kernel-timeout")
    config.addinivalue_line(
        "markers",
        "edits(file): this test grades a file next to the exercise's module (WRITEUP.md), not the "
        "module; 'next' names that file when only such tests fail")
    config.addinivalue_line(
        "markers",
        "host_interpret(what): part of this test checks what only TPU interpret mode shows (races between "
        "two TensorCores, DMA execution orders, out-of-bounds block indices); where kernels run natively on "
        "a TPU, that part runs under interpret mode on the host's CPU, in a process of its own")
    config.addinivalue_line(
        "markers",
        "devices(n): the test builds meshes of up to n devices; a TPU host with fewer chips runs it on n "
        "CPU devices under TPU interpret mode, in a process of its own")


def edits_file(item: pytest.Item) -> str | None:
    """The file a test's @pytest.mark.edits names, or None."""
    mark = item.get_closest_marker("edits")
    return None if mark is None else str((list(mark.args) + list(mark.kwargs.values()))[0])


def kernel_timeout(item: pytest.Item) -> float | None:
    """The seconds of a test's @pytest.mark.kernel_timeout, or None."""
    mark = item.get_closest_marker("kernel_timeout")
    return None if mark is None else float((list(mark.args) + list(mark.kwargs.values()))[0])


def host_interpret(item: pytest.Item) -> str | None:
    """What the part of a test that only TPU interpret mode shows checks (its host_interpret marker), or None."""
    mark = item.get_closest_marker("host_interpret")
    args = [] if mark is None else list(mark.args) + list(mark.kwargs.values())
    return args[0] if len(args) == 1 and isinstance(args[0], str) and args[0].strip() else None


def devices_needed(item: pytest.Item) -> int | None:
    """The most devices a test's meshes span (its devices marker), or None: it builds no mesh."""
    mark = item.get_closest_marker("devices")
    args = [] if mark is None else list(mark.args) + list(mark.kwargs.values())
    good = len(args) == 1 and isinstance(args[0], int) and not isinstance(args[0], bool) and args[0] >= 1
    return args[0] if good else None  # a malformed marker: check() refuses it


def gate_number(item: pytest.Item) -> int | None:
    """The gate an item tests (its closest @pytest.mark.gate), or None."""
    mark = item.get_closest_marker("gate")
    return None if mark is None else (list(mark.args) + list(mark.kwargs.values()))[0]


def roofline_cost(item: pytest.Item) -> roofline.Cost | None:
    """The cost a test's @pytest.mark.roofline(flops=..., bytes=...) gives, if any."""
    mark = item.get_closest_marker("roofline")
    return roofline.marker_cost(mark) if mark is not None else None


def roofline_prediction(item: pytest.Item, registry: chips.ChipRegistry,
                        run_chip: chips.Chip) -> roofline.Prediction | None:
    """The prediction of a test's roofline marker: for its chip= (a name the registry knows) or
    else the run's chip."""
    cost = roofline_cost(item)
    if cost is None:
        return None
    name = item.get_closest_marker("roofline").kwargs.get("chip")
    chip = registry.get(name) if name else run_chip
    return roofline.predict(chip.per_device(), cost)


def check(items: list[pytest.Item], registry: chips.ChipRegistry, run_chip: chips.Chip) -> None:
    """Refuse a malformed marker (a usage error naming the test); a roofline marker's
    prediction goes into the test's user_properties (junit XML)."""
    for item in items:
        for mark in item.iter_markers("gate"):
            args = list(mark.args) + list(mark.kwargs.values())
            if len(args) != 1 or not is_gate_number(args[0]):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.gate takes one integer gate number {gate_range()}, "
                    f"got gate({', '.join(map(repr, args))})")
        for mark in item.iter_markers("kernel_timeout"):
            args = list(mark.args) + list(mark.kwargs.values())
            if (len(args) != 1 or not isinstance(args[0], (int, float)) or isinstance(args[0], bool)
                    or args[0] <= 0):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.kernel_timeout takes one positive number of seconds, "
                    f"got kernel_timeout({', '.join(map(repr, args))})")
        for mark in item.iter_markers("host_interpret"):
            args = list(mark.args) + list(mark.kwargs.values())
            if len(args) != 1 or not isinstance(args[0], str) or not args[0].strip():
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.host_interpret takes one string, what the interpret-mode part "
                    f"checks, got host_interpret({', '.join(map(repr, args))})")
        for mark in item.iter_markers("devices"):
            args = list(mark.args) + list(mark.kwargs.values())
            if len(args) != 1 or not isinstance(args[0], int) or isinstance(args[0], bool) or args[0] < 1:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.devices takes one positive number of devices, "
                    f"got devices({', '.join(map(repr, args))})")
        for mark in item.iter_markers("roofline"):
            try:
                if mark.kwargs.get("chip") is not None:
                    chips.validate_chip(mark.kwargs["chip"], registry.names)
                prediction = roofline_prediction(item, registry, run_chip)
            except ValueError as error:
                raise pytest.UsageError(f"{item.nodeid}: roofline marker: {error}") from None
            if prediction is not None:
                item.user_properties.append(("roofline", {
                    "chip": prediction.chip, "floor_s": prediction.floor_seconds,
                    "bound": prediction.bound, "intensity": prediction.intensity,
                }))


def select_gate_tests(config: pytest.Config, items: list[pytest.Item], gates_only: bool) -> None:
    """--gates: only the gate tests run (the rest deselected); otherwise gate tests are skipped."""
    if gates_only:
        selected = [i for i in items if i.get_closest_marker("gate") is not None]
        deselected = [i for i in items if i.get_closest_marker("gate") is None]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = selected
    else:
        skip = pytest.mark.skip(reason=GATE_TESTS_SKIPPED)
        for item in items:
            if item.get_closest_marker("gate") is not None:
                item.add_marker(skip)
