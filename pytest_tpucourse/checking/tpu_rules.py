"""Checks a CPU can run that a TPU would otherwise be the first to fail.

- The TPU lowering (`lowering_platforms=("tpu",)`) runs Pallas' Mosaic lowering
  on the CPU: it rejects block shapes that break the (8,128)/(16,128) rule and
  primitives Mosaic cannot lower, naming the BlockSpec or the op. Neither
  interpreter checks either.
- The real compile (`assert_compiles_for`, with the `tpu-compile` extra): libtpu's
  Mosaic and LLO compiler, ahead of time for a described chip, checks what the
  lowering cannot (the dtype's tiling, the scoped-VMEM limit).
- Race detection: TPU interpret mode with `detect_races=True` on two simulated
  TensorCores, so the steps of a "parallel" grid axis really run on different
  cores; two cores writing one block (a reduction axis marked "parallel") or
  an unsynchronised DMA is reported.
- Every DMA execution mode: a kernel that issues DMAs is checked once per mode of
  TPU interpret mode (`dma_execution_mode`), since each mode hides some DMA bugs
  the other shows, and a semaphore left non-zero when a kernel ends (a copy or a
  signal nobody waited for) fails the check.
- Races are checked once per interpreter seed (each seed shuffles the parallel
  axes in another order), and results that differ between two orders fail too.
"""

from __future__ import annotations

import contextlib
import io

from ..chips import Chip
from ..core import jax_internals
from ..readers.mosaic import lowering_for
from ..core.outcomes import LearnerCodeError, WrongResult
from ..grading import placement

MAX_LINES = 6


def assert_lowers_for_tpu(fn, *args, compile_ahead: bool = False, **kwargs) -> None:
    """Fail if the TPU (Mosaic) lowering rejects fn(*args, **kwargs).

    Some lowering rules depend on the chip generation (integer `//` and `sign`, for one)
    and ask the local device, which on a CPU is no TPU: they lower for the run's chip
    (`--chip`, the course's default chip where none is named) instead.

    compile_ahead=True, where the real compiler is installed: the program is exported for that chip
    (`jax.export`, which lowers it for a TPU as this check does, and serializes it) and starts
    compiling in the background (libtpu.compile_ahead). A test file that checks lowering first and
    `assert_compiles_for` on the same arguments last finds the compile done, the compiler having run
    on another core while the tests between them ran. Where the export fails, the plain lowering
    below gives the verdict, as without it. With the real compiler installed the check is that export
    in any case, kept for the run (libtpu.exported): the compile check of the same call exports nothing
    again.
    """
    import jax

    from ..compiler import libtpu

    program = fn.program_jaxpr(*args, **kwargs)  # a stub or a tracing error is reported as such, first
    function = fn.resolve()
    chip = fn.context.kernel_chip()
    exported = libtpu.exported(function, *args, chip=chip, keep_for_the_run=True, **kwargs)
    if exported is not None:
        if compile_ahead:
            libtpu.compile_ahead(function, *args, chip=chip, timeout=_compile_timeout(fn), exported_program=exported,
                                 **kwargs)
        return
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    # Interpret mode would replace the Mosaic lowering: switch it off for the trace.
    with lowering_for(chip):
        try:
            jax.jit(lambda *a: function(*a, **kwargs)).trace(*shapes).lower(
                lowering_platforms=("tpu",))
        except Exception as error:
            raise WrongResult(_lowering_refused(fn, error, program, args, kwargs)) from None


def assert_compiles_for(fn, *args, chip: Chip | str | None = None, compile_timeout: float | None = None,
                        answer_later: bool = False, **kwargs) -> None:
    """Fail if the real TPU compiler rejects fn(*args, **kwargs) for `chip` (libtpu, ahead of
    time: tiling, scoped VMEM and everything else Mosaic and LLO check); skipped without libtpu.
    chip: a Chip or a name the run knows; by default the chip the lowering check targets (the
    run's, `--chip`, or the course's default). compile_timeout: seconds the compile may take (by
    default libtpu's DEFAULT_TIMEOUT_SECONDS, or the test's kernel timeout where longer; a gate-sized
    program of whole-array blocks takes minutes).

    answer_later=True, for a compile of seconds (a gate's blocks): in a learner's run answered by
    the warm process (learner/served_runs.py), a program neither kept from an earlier compile nor
    compiled already is compiled there after the run has answered, and the check is skipped saying
    so; the next run reads the verdict (tpu-compiles/). Every other run waits for it. Such a
    program is not compiled ahead by its lowering check: it would take the run's cores."""
    from ..compiler import libtpu

    chip = fn.context.chip_named(chip)
    fn.program_jaxpr(*args, **kwargs)  # a stub or a tracing error is reported as such, first
    libtpu.skip_unless_available()
    program = libtpu.exported(fn.resolve(), *args, chip=chip, keep_for_the_run=True, **kwargs)  # once, for all
    if answer_later and fn.context.in_warm_process:
        if not libtpu.answers_now(fn.resolve(), *args, chip=chip, exported_program=program, **kwargs):
            libtpu.compile_ahead(fn.resolve(), *args, chip=chip, timeout=compile_timeout or _compile_timeout(fn),
                                 after_the_run=True, exported_program=program, **kwargs)
            import pytest

            pytest.skip(f"{fn.display}: its compile for a {chip.name} TPU at these blocks takes seconds and "
                        f"{libtpu.VERDICT_NEXT_RUN}")
    try:
        libtpu.compile_for(fn.resolve(), *args, chip=chip, timeout=compile_timeout or _compile_timeout(fn),
                           exported_program=program, **kwargs)
    except libtpu.TpuCompileError as error:
        raise WrongResult(f"{fn.display} would not compile for a {chip.name} TPU: {error}") from None


def _compile_timeout(fn) -> float:
    """Seconds a compile of fn's program may take: libtpu's default, or the test's kernel timeout
    where that is longer. A kernel's deadline is for its run ("compiling is not counted"): a compile
    at the gate's blocks takes 8-10 s alone, a 2048² f32 block at HIGHEST precision nearer a minute on
    two loaded cores, and the 60 s default deadline failed such a compile of a correct kernel."""
    from ..compiler import libtpu

    return max(fn.context.deadline.seconds or 0.0, libtpu.DEFAULT_TIMEOUT_SECONDS)


RACE_BETWEEN_CORES = ("two cores touch one buffer without ordering. A reduction grid axis marked "
                      "\"parallel\" does this.")
RACE_BETWEEN_DEVICES = ("a device or a DMA touches a buffer that another is still using, with no "
                        "semaphore wait ordering them: a semaphore shared by two copies, or a buffer "
                        "reused before the copy out of it or into it was waited for.")
RACE_WITH_A_COPY = ("a buffer is read or written while a DMA into it may still be running, or two "
                    "cores touch one block. Wait for a copy before reading its buffer, and start the "
                    "next copy into the other slot.")


# Interpreter seeds the race check runs under: each shuffles the parallel grid axes
# in another order, and one order can hide a bug another shows.
RACE_SEEDS = (0, 1)


def assert_no_races(fn, *args, cores: int = 2, why: str = RACE_BETWEEN_CORES, seeds=RACE_SEEDS,
                    **kwargs) -> None:
    """Run fn under TPU interpret mode with race detection on `cores` simulated cores, once per seed.

    Every pallas_call fn issues runs under the detector: a gradient's forward and backward
    kernels alike. why: what such a race usually is, for the report (RACE_BETWEEN_DEVICES
    for kernels that copy between devices, run with cores=1).

    A correct kernel returns the same bits whatever order its parallel steps run in, so
    results that differ between two seeds fail too (a state-carrying axis marked "parallel"
    whose steps happened to stay on one core). The interpreter deals the parallel subgrid
    to the cores in contiguous chunks, so a wrongly parallel axis races only where a chunk
    boundary cuts the run of steps that share an output block: with two cores, where the
    parallel extents before that axis multiply to an odd number. Graded tests pick such
    shapes (one batch, an odd number of q blocks or heads) and say so.

    A test that also checks fn's values on these inputs can do both in one call instead,
    `with checking_races(fn): ...` (one seed; the value check there judges that order).
    """
    import jax
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    if not placement.interpret_part_here(_race_check(cores)):
        return
    results = []
    for seed in seeds:
        with interpret_setting("races", fn, base=pltpu.InterpretParams(random_seed=seed), cores=cores, why=why):
            out = jax.block_until_ready(fn(*args, **kwargs))
        results.append((seed, [np.asarray(leaf) for leaf in jax.tree.leaves(out)]))
    (first_seed, first), rest = results[0], results[1:]
    for seed, leaves in rest:
        for position, (a, b) in enumerate(zip(first, leaves)):
            differ = _differ(a, b)
            if differ.any():
                where = f"output[{position}]" if len(first) > 1 else "its output"
                raise WrongResult(
                    f"{fn.display} gives different results when its parallel grid steps run in "
                    f"another order (TPU interpret mode, random_seed {first_seed} and {seed}): "
                    f"{where} differs in {int(differ.sum())} of {differ.size} elements. The steps "
                    f"of a \"parallel\" axis must not depend on each other: an axis that carries "
                    f"state (an accumulator reset at its first step, written at its last) must be "
                    f"\"arbitrary\".")


def checking_races(fn, *, cores: int = 2, why: str = RACE_BETWEEN_CORES):
    """A context manager: the block's calls of fn run under race detection on `cores` simulated
    cores, and fn fails on a race found there, as assert_no_races would.

    For a value check whose inputs are the race check's: values and races come from the same
    call, and the kernel program is compiled once, not once per check. Parallel grid axes still
    run in the shuffled order of a plain run, split between the cores.
    """
    return interpret_setting("races", fn, cores=cores, why=why)


def _race_check(cores: int) -> str:
    return f"the race check ({cores} TensorCore{'s' if cores != 1 else ''} per device)"


def _lowering_refused(fn, error, program, args, kwargs) -> str:
    """The report of a refused lowering: in the course's words where it is a common refusal, the
    lowering's own otherwise; what the check lowered (chip, dtypes, block sizes); the call."""
    from ..grading.messages import lowering_explanation, lowering_text
    from ..readers.reproduction import reproduction

    course_root = getattr(fn, "_course_root", None)  # a derived function's (a gradient's) too
    explained = lowering_explanation(error, program, course_root)
    lines = explained or lowering_text(error, MAX_LINES)
    dtypes = sorted({str(getattr(a, "dtype", type(a).__name__)) for a in args})
    settings = ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "the function's default block sizes"
    checked = (f"(checked: the lowering for a {fn.context.kernel_chip().name}, {'/'.join(dtypes)} inputs, "
               f"{settings})")
    return (f"{fn.display} would not compile for a TPU: the Mosaic lowering rejects it.\n"
            + "\n".join(f"  {line}" for line in [*lines, checked]) + reproduction(fn))


# ---------------------------------------------------------------- interpret settings
#
# TPU interpret mode simulates DMAs in two orders and can watch for races; a DMA bug
# shows under some settings and hides under others (a copy never waited for reads NaN
# when copies run only on their wait, and gives right values when they run at once;
# then only the semaphore still counting at kernel exit gives it away). One mechanism,
# `interpret_setting`, runs a check under one setting and judges what the interpreter
# printed: chapter 6's graded tests run a kernel under each setting, the race checks use
# "races", and kernels that copy between devices are checked in every DMA mode
# (`assert_correct_in_each_dma_mode`).

# What each DMA execution mode hides: under on_wait a read before the wait sees NaN; under
# eager the values come out right and only the semaphore still counting at kernel exit
# (printed by the interpreter) gives a never-waited copy away.
DMA_EXECUTION_MODES = {
    "on_wait": "which runs a copy only when something waits on its semaphore",
    "eager": "which runs a copy the moment it starts",
}
SETTINGS = {
    **{mode: dict(dma_execution_mode=mode) for mode in DMA_EXECUTION_MODES},
    # two simulated TensorCores and the happens-before race detector
    "races": dict(detect_races=True, num_cores_or_threads=2),
}
DMA_SETTINGS = tuple(SETTINGS)


@contextlib.contextmanager
def interpret_setting(name: str, fn=None, *, base=None, cores: int | None = None,
                      why: str = RACE_WITH_A_COPY):
    """Run the block under TPU interpret mode with one of SETTINGS.

    base: the InterpretParams the setting changes (InterpretParams(random_seed=0) by default);
    cores: the simulated cores per device, in place of the setting's.
    With `fn` (the graded function the block calls), the block is also judged on what the
    interpreter did: a device id outside the mesh (which the interpreter runs as another device,
    or fails on with its own KeyError or IndexError), a semaphore still counting at kernel exit (a
    copy started and never waited for), a race (`why` says what it usually is), or copies the
    kernel's signals and waits do not order fail as fn's mistake. They name the cause, so they are
    reported in place of a wrong value (or the interpreter's error) the block found, which is only
    its symptom; a wrong value with no such cause says which setting showed it.
    """
    import dataclasses

    from jax.experimental.pallas import tpu as pltpu

    what = _race_check(cores or SETTINGS["races"]["num_cores_or_threads"]) if name == "races" \
        else f"the check under dma_execution_mode={name!r}"
    if not placement.interpret_part_here(what):  # natively: the block's values are the chip's
        yield None
        return
    setting = {**SETTINGS[name], **(jax_internals.race_detection_options() if name == "races" else {})}
    params = dataclasses.replace(base or pltpu.InterpretParams(random_seed=0), **setting)
    if cores is not None:
        params = dataclasses.replace(params, num_cores_or_threads=cores)
    printed = io.StringIO()
    pltpu.reset_tpu_interpret_mode_state()  # no race found by an earlier kernel is read as this one's
    try:
        with (pltpu.force_tpu_interpret_mode(params), contextlib.redirect_stdout(printed),
              jax_internals.race_reports_into(printed), jax_internals.recording_device_events() as events,
              jax_internals.semaphores_left_at_kernel_end() as left):
            yield params
    except (WrongResult, LearnerCodeError) as failure:
        cause = fn and _outside_the_mesh(fn, params, events)
        if cause is None and fn and isinstance(failure, WrongResult):
            cause = (_unclean_exit(fn, params, printed.getvalue(), why, events=events, left=left)
                     or _unordered(fn, params, events))
        if cause:
            raise cause from None
        if isinstance(failure, LearnerCodeError):
            raise
        raise failure.with_suffix(f"\n  (under TPU interpret mode with {_described(params)})") from None
    cause = fn and (_outside_the_mesh(fn, params, events)
                    or _unclean_exit(fn, params, printed.getvalue(), why, events=events, left=left)
                    or _unordered(fn, params, events))
    if cause:
        raise cause


def _outside_the_mesh(fn, params, events) -> WrongResult | None:
    """A signal or copy to a device id the mesh does not have, read from what each device ran."""
    from . import device_order

    found = device_order.outside_the_mesh(events)
    if not found:
        return None
    first = found[0][0]
    lines = [line for _, line in found]
    return WrongResult(
        f"{fn.display} names device {first.peer}, which its mesh of {first.devices} devices does not have: "
        f"a device id must be in 0 .. n-1.\n  "
        + "\n  ".join(lines[:SYNC_LINES])
        + (f"\n  ... and {len(lines) - SYNC_LINES} more" if len(lines) > SYNC_LINES else "")
        + f"\n  (read from each device's signals and copies under TPU interpret mode with {_described(params)})",
        suffix=_reproduction(fn))


def _unordered(fn, params, events) -> WrongResult | None:
    """A copy that the kernel's signals and waits do not order, read from what each device ran
    in its own program order: the same verdict whatever order the device threads ran in."""
    from . import device_order

    found = device_order.problems(events)
    if not found:
        return None
    return WrongResult(
        f"{fn.display} lets a copy land before the device it depends on is ready.\n  "
        + "\n  ".join(found[:SYNC_LINES])
        + (f"\n  ... and {len(found) - SYNC_LINES} more of the kind" if len(found) > SYNC_LINES else "")
        + f"\n  (read from each device's signals, waits and copies in its own program order, under TPU "
          f"interpret mode with {_described(params)}: the verdict does not depend on the order the devices "
          f"happened to run in)", suffix=_reproduction(fn))


SYNC_LINES = 2  # a ring kernel's mistake repeats on every device: two say it


def _reproduction(fn) -> str:
    """The lines that make fn's latest call again, for a cause found in place of a check's verdict."""
    from ..readers.reproduction import reproduction

    return reproduction(fn) if hasattr(fn, "resolve") else ""


def _described(params) -> str:
    """The setting a run used, for a report: its DMA mode, or its race detection."""
    if params.detect_races:
        cores = params.num_cores_or_threads
        return f"{cores} TensorCore{'s' if cores != 1 else ''} per device (detect_races=True)"
    mode = params.dma_execution_mode
    return f"dma_execution_mode={mode!r}, {DMA_EXECUTION_MODES.get(mode, '')}".rstrip(", ")


# What each kind of semaphore left counting says about the kernel.
_LEFT_BY = {
    "DMA": "a copy started and never waited for leaves its DMA semaphores counting (bytes): every "
           ".start() needs its .wait() before the kernel ends, and before its buffer is read",
    "REGULAR": "a signal nobody waits for leaves a regular semaphore counting: give only the signals "
               "that will be waited for, and wait for every one",
    "barrier": "a barrier signal nobody waits for leaves the barrier semaphore counting, where the next "
               "kernel that shares its collective_id would read it: wait for as many signals as are sent",
}


def _unclean_exit(fn, params, text: str, why: str, *, events=(), left=()) -> WrongResult | None:
    """A semaphore left counting or a race the interpreter reported, as fn's mistake. left: the
    semaphores every device left counting (jax_internals.semaphores_left_at_kernel_end); where the
    run recorded none, those the interpreter printed at each device's exit."""
    when = "when every device had ended its kernel" if left else "as each device left its kernel"
    left = list(left) or jax_internals.semaphores_left_nonzero(text)
    if left:
        named = _left_semaphores(fn, left, events)
        kinds = [kind for kind in ("DMA", "REGULAR", "barrier") if any(k == kind for _, k, _, _ in named)]
        return WrongResult(
            f"{fn.display} ends its kernel with semaphores that are not back at zero: "
            + "; ".join(f"{what} = {count} on {jax_internals.devices_text(devices)}" for what, _, count, devices in named)
            + ".\n  " + ".\n  ".join(_LEFT_BY[kind][0].upper() + _LEFT_BY[kind][1:] for kind in kinds)
            + ". A TPU reports this as an error when the kernel ends."
            + f"\n  (read {when}, under TPU interpret mode with {_described(params)})",
            suffix=_reproduction(fn))
    if (params.detect_races and jax_internals.races_found()) or "RACE DETECTED" in text:
        from ..grading.messages import parallel_axes_outputs_ignore

        course_root = getattr(getattr(fn, "module", None), "course_root", None)
        program = fn._program_of_last_call() if hasattr(fn, "_program_of_last_call") else None
        semantics = parallel_axes_outputs_ignore(program, course_root)
        copies = {e.dma: f"device {e.device}'s copy into device {e.peer}" + (f" (at {e.where})" if e.where else "")
                  for e in events if e.op == "copy" and e.dma is not None}
        seen = jax_internals.race_summary(text, copies)  # the detector's dump, said once in the course's words
        return WrongResult(
            f"{fn.display} has a data race under TPU interpret mode with {_described(params)}: "
            f"{why}" + "".join(f"\n  {line}" for line in [*semantics, seen] if line))
    return None


def _left_semaphores(fn, left, events) -> list[tuple[str, str, str, list[int]]]:
    """(what it is, its kind, its count, its devices) of each semaphore left counting: named by the
    kernel's parameter where the program says which it is (`credit`, a REGULAR semaphore), else
    by its number, its kind read from what the devices did with it (copied, or signalled)."""
    names = _scratch_semaphore_names(fn)
    copied = {sem for e in events if e.op in ("copy", "copy_wait") for sem in (e.sem, e.send_sem)}
    grouped: dict[tuple[str, str, str], list[int]] = {}
    for semaphore in left:
        index = semaphore.scratch_index
        if index is None:
            what, kind = "the barrier semaphore", "barrier"
        elif names is not None and index < len(names):
            name, kind = names[index]
            what = f"`{name}` (a {kind} semaphore, scratch semaphore {index})"
        else:
            kind = "DMA" if semaphore.sem in copied else "REGULAR"
            what = f"scratch semaphore {index} (a {kind} semaphore)"
        unit = " bytes" if kind == "DMA" else ""
        grouped.setdefault((what, kind, f"{semaphore.count:,}{unit}"), []).append(semaphore.device)
    return [(what, kind, count, devices) for (what, kind, count), devices in grouped.items()]


def _scratch_semaphore_names(fn) -> list[tuple[str, str]] | None:
    """The scratch semaphores of fn's kernel, where its last call runs one pallas_call (or several
    that agree on them), else None."""
    from ..readers import traced_program

    program = fn._program_of_last_call() if hasattr(fn, "_program_of_last_call") else None
    if program is None:
        return None
    try:
        kernels = [jax_internals.scratch_semaphore_names(eqn) for eqn in traced_program.pallas_call_eqns(program)]
    except Exception:
        return None
    kernels = [k for k in kernels if k]
    return kernels[0] if kernels and all(k == kernels[0] for k in kernels) else None


def recorded_grid_points(fn, *args, **kwargs) -> list[tuple[tuple[int, ...], int]]:
    """(grid point, core) of every kernel step fn runs, in the order TPU interpret mode runs
    them (its own record, `InterpretParams(grid_point_recorder=...)`)."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    points = []

    def record(token, coords, core):
        points.append((tuple(int(c) for c in coords), int(core)))
        return token

    params = pltpu.InterpretParams(random_seed=0, grid_point_recorder=record)
    with pltpu.force_tpu_interpret_mode(params):
        jax.block_until_ready(fn(*args, **kwargs))
    return points


def assert_out_of_bounds_raises(fn, *args, what: str = "an index", **kwargs) -> None:
    """fn(*args) must fail on an out-of-bounds block index under TPU interpret mode.

    TPU interpret mode checks a block index; the generic interpreter (`interpret=True`)
    clamps it to the last block, and so may the compiled kernel on a TPU (a table XLA placed
    in VMEM: chapter 6's README). A function that
    clamps or wraps an index itself returns a plausible wrong answer instead.
    """
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from ..grading import backend

    if not placement.interpret_part_here("the out-of-bounds check"):
        return
    function = fn.resolve()  # called once, as written: a failing compiled call would run twice
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(random_seed=0)):
        try:
            with backend.quiet_callback_errors():
                fn.context.deadline.call(lambda: jax.block_until_ready(function(*args, **kwargs)))
        except Exception as error:
            backend.reset_after_failure()
            if "Out-of-bounds" in str(error):
                return
            raise fn._outcome(error) from None
    raise WrongResult(
        f"{fn.display} returned a result for {what} outside the array; TPU interpret mode "
        f"raises on an out-of-bounds block index, so the index was clamped or wrapped before "
        f"it reached the index map. A caller's bad index must fail, not read another row.")


def assert_prefetches(fn, *args, **kwargs) -> None:
    """Fail unless fn's kernel starts the next copy before it waits for the current one.

    Read off the kernel jaxpr: its DMA starts and waits in program order, each loop body
    once, and each `pl.when` with its branch taken. A double-buffered pipeline has two
    copies in flight at some wait; a serial one (wait, compute, then start the next)
    never does, and gives the same values without hiding any copy behind compute.
    """
    from ..readers import traced_program

    kernels = traced_program.pallas_call_eqns(fn.jaxpr(*args, **kwargs))
    events = [e for eqn in kernels for e in _dma_events(jax_internals.kernel_jaxpr(eqn))]
    if "wait" not in events:
        raise WrongResult(f"{fn.display} issues no DMA wait in its kernel: the exercise is a manual "
                          f"pipeline of pltpu.make_async_copy(...).start() and .wait().")
    in_flight, most = 0, 0
    for event in events:
        if event == "start":
            in_flight += 1
        else:
            most = max(most, in_flight)
            in_flight -= 1
    if most < 2:
        raise WrongResult(
            f"{fn.display} waits for each copy before it starts the next one: correct values, "
            f"but no copy ever runs behind compute. Start block i + 1's copy (into the other "
            f"slot) before waiting for block i's.")


def assert_no_races_in_backward(fn, args, *, kwargs=None, cores: int = 2, seeds=RACE_SEEDS,
                                seed: int = 0) -> None:
    """assert_no_races on the kernels of fn's backward alone, for seeded random cotangents.

    The forward runs first, under the session's interpret mode; only the pullback (the
    VJP's backward rule and every kernel it issues) runs under the detector. For a backward
    whose summed axes can race where its forward has nothing to race, such as dk and dv
    summed over the query heads of a GQA group, while the forward's own race check runs
    elsewhere.
    """
    import functools

    import jax

    from ..grading import backend
    from ..strategies import random_array

    kwargs = kwargs or {}
    fn.jaxpr(*args, **kwargs)  # a stub (TODO) or a tracing error is reported as such, first
    if not placement.interpret_part_here(_race_check(cores)):
        return
    outputs = jax.eval_shape(functools.partial(fn.resolve(), **kwargs), *args)
    cotangents = jax.tree.map(lambda x: random_array(x.shape, x.dtype, seed), outputs)

    def pullback_of(function):
        # jax.vjp's pullback is a pytree (its leaves are the residuals), so one compiled
        # program can run the forward and hand the pullback back.
        try:
            return jax.jit(lambda *a: jax.vjp(lambda *x: function(*x, **kwargs), *a)[1])(*args)
        except Exception as error:  # the learner's forward, run again for its residuals
            backend.reset_after_failure()
            raise fn._outcome(error) from None

    backward = fn.derived(pullback_of, f"the backward of {fn.display}")
    backward.resolve()  # computes the residuals now, outside the detector
    assert_no_races(backward, cotangents, cores=cores, seeds=seeds)


def _differ(a, b):
    """Where two results differ, bit for bit (NaN equals NaN)."""
    import jax.numpy as jnp
    import numpy as np

    if a.shape != b.shape:
        return np.ones(a.shape or (1,), bool)
    if jnp.issubdtype(a.dtype, jnp.inexact):
        a, b = a.astype(np.float64), b.astype(np.float64)
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return a != b


def _dma_events(jaxpr) -> list[str]:
    from ..readers import traced_program

    events = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dma_start":
            events.append("start")
        elif name == "dma_wait":
            events.append("wait")
        elif name == "cond":  # pl.when: the branch that does something
            branches = [_dma_events(b.jaxpr) for b in jax_internals.cond_branches(eqn)]
            events.extend(max(branches, key=len))
        else:
            for sub in traced_program.sub_jaxprs(eqn):
                events.extend(_dma_events(sub))
    return events


# The two DMA execution modes of TPU interpret mode. Each hides bugs the other shows: a
# semaphore shared by two copies lets an on_wait wait return before its own copy landed,
# while eager copies hide it; a receive buffer reused before it was read is overwritten by
# an eager copy, while on_wait copies land too late to hide anything (README of chapter 14).
def assert_correct_in_each_dma_mode(fn, check) -> None:
    """Run `check()`, the value checks of fn, once per DMA execution mode of TPU interpret mode.

    No one mode shows every DMA bug (DMA_EXECUTION_MODES says which hides what), so a
    kernel that issues DMAs is checked in all of them (`interpret_setting`), and a semaphore
    that a kernel leaves non-zero at its end fails the check too. The session's other
    interpret settings are kept; off a TPU the generic interpreter (--interpret fast), which
    cannot run remote DMAs, is replaced by TPU interpret mode. Natively on a TPU the check
    runs once.
    """
    from jax.experimental.pallas import tpu as pltpu

    setting = jax_internals.interpret_mode_in_effect()
    if setting is None:  # kernels compiled: the values are the chip's, checked once
        # natively on a TPU the modes themselves run on the host's CPU (a test not placed so is refused)
        placement.interpret_part_here("the checks under each DMA execution mode")
        check()
        return
    base = setting if isinstance(setting, pltpu.InterpretParams) else None
    for mode in DMA_EXECUTION_MODES:
        with interpret_setting(mode, fn, base=base, why=RACE_BETWEEN_DEVICES):
            check()
