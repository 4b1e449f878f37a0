"""A ceiling given as a sweep of candidates (block sizes) or a space of knobs to search (sweeps.Space):
the fastest correct one on this chip, or the choice of a sweep kept from an earlier run (sweeps.py),
timed again in the run's rounds."""

from __future__ import annotations

from . import sweeps
from .sampling import compile_ahead, compiled, wrong_output


def key(run, op: str, shapes, dtype: str) -> sweeps.SweepKey:
    p = run.provenance
    return sweeps.SweepKey(chip=run.chip.name, device_kind=p.device_kind, jax=p.jax, jaxlib=p.jaxlib,
                           libtpu=p.libtpu, gate=run.gate.number, op=op, shapes=shapes, dtype=dtype)


def ahead(run, ceiling, key: sweeps.SweepKey):
    """The ceiling's function as the run will time it, where that is known before anything runs (a
    function, or the kept choice of a sweep or search), to compile ahead; None otherwise."""
    if ceiling is None or not isinstance(ceiling, (dict, sweeps.Space)):
        return ceiling
    earlier, _ = _kept(run, key, ceiling)
    if earlier is None:
        return None
    return ceiling.function(earlier.choice) if isinstance(ceiling, sweeps.Space) else ceiling.get(earlier.best)


def tune(run, candidates: dict, input_sets, expected, dtype, key: sweeps.SweepKey):
    """The ceiling of a sweep of candidates on this chip, and the sweep as notes for its row.

    A sweep kept from an earlier run on this chip with these versions (sweeps.py) gives the
    choice, unless the run asked to sweep again (--resweep) or the kept choice is wrong here;
    either way the ceiling is then timed in this run's rounds and checked like any other.
    """
    if isinstance(candidates, sweeps.Space):
        return _search(run, candidates, input_sets, expected, dtype, key)
    path = run.context.sweeps_path
    earlier, source = _kept(run, key, candidates)
    if earlier is not None:
        wrong = wrong_output(f"ceiling {earlier.best}", candidates[earlier.best], input_sets, expected, dtype)
        if not wrong:
            return candidates[earlier.best], (f"ceiling {earlier.best}, the choice of a sweep {source} "
                                              f"({earlier.describe()}), reused: only the choice, timed in "
                                              f"this run's rounds (pytest --gates --resweep sweeps again)")
    correct, notes = {}, []
    compiled(compile_ahead(candidates, input_sets[0]))
    for label, fn in candidates.items():
        wrong = wrong_output(f"ceiling {label}", fn, input_sets, expected, dtype)
        if wrong:
            notes.append(f"{label}: wrong or failed ({wrong.splitlines()[0][:120]})")
        else:
            correct[label] = fn
    if not correct:
        return None, "; ".join(notes)
    timings = run.harness.measure(correct, input_sets) if len(correct) > 1 else None
    if timings is None:
        best = next(iter(correct))
    else:
        best = min(timings, key=lambda label: timings[label].summary.median)
        kept_note = _keep(path, sweeps.Sweep(
            key=key, candidates=tuple(candidates), best=best, notes="; ".join(notes),
            times={label: t.summary.median for label, t in timings.items()}, rehearsal=run.rehearsal is not None))
        notes = [f"{label}: {t.summary.median * 1e6:.1f} us" for label, t in timings.items()] + notes + kept_note
    again = f"the kept choice {earlier.best} was wrong here, swept again; " if earlier is not None else ""
    return correct[best], (f"{again}ceiling tuned over {len(candidates)} block sizes ({'; '.join(notes)}): "
                           f"chose {best}")


def _search(run, space: sweeps.Space, input_sets, expected, dtype, key: sweeps.SweepKey):
    """A searched space's ceiling (sweeps.search): a kept choice if there is one and it is correct here,
    else a search on the chip, kept for later runs. The notes name the choice and where it sits."""
    earlier, source = _kept(run, key, space)
    resume = None
    if earlier is not None:
        fn = space.function(earlier.choice)
        wrong = wrong_output(f"ceiling {earlier.best}", fn, input_sets, expected, dtype)
        if not wrong and run.context.finish_searches and sweeps.unfinished(earlier):
            resume = earlier  # --finish-searches: on from where it stopped
        elif not wrong:
            return fn, (f"ceiling {earlier.best} of {space.name}, the choice of a search {source} "
                        f"({earlier.describe()}), reused: only the choice, timed in this run's rounds "
                        f"(pytest --gates --resweep searches again"
                        + (", --finish-searches continues it)" if sweeps.unfinished(earlier) else ")"))

    def measure(fns: dict) -> dict:
        correct, out = {}, {}
        compiled(compile_ahead(fns, input_sets[0]))  # a round's candidates compile side by side
        for label, fn in fns.items():
            wrong = wrong_output(f"ceiling {label}", fn, input_sets, expected, dtype)
            if wrong:
                out[(label, "failed")] = wrong.splitlines()[0][:120]
            else:
                correct[label] = fn
        if len(correct) == 1 and len(fns) == 1:
            out.update({label: 1.0 for label in correct})  # nothing to compare it with: no timing
        elif correct:
            out.update({label: t.summary.median for label, t in run.harness.measure(correct, input_sets).items()})
        return out

    found = sweeps.search(space, measure, resume)
    if found.best is None:
        return None, "; ".join(f"{label}: wrong or failed ({why})" for label, why in found.failed.items())
    timed = len(found.times) > 1
    kept_note = _keep(run.context.sweeps_path, sweeps.Sweep(
        key=key, candidates=tuple(found.tried), best=found.best, space=space.identity(),
        choice=found.tried[found.best], placement=found.placement, rehearsal=run.rehearsal is not None,
        times=found.times if timed else {found.best: 1.0},
        notes="; ".join(f"{label}: {why}" for label, why in found.failed.items()))) if timed else []
    notes = ([f"{label}: {seconds * 1e6:.1f} us" for label, seconds in found.times.items()] if timed else [])
    notes += [f"{label}: wrong or failed ({why})" for label, why in found.failed.items()] + kept_note
    if resume is not None:
        again = (f"the search {source} ({resume.date[:10]}, {len(resume.candidates)} configurations, its budget "
                 f"spent) continued from its choice {resume.best}; its candidates' times are that run's; ")
    elif earlier is not None:
        again = f"the kept choice {earlier.best} was wrong here, searched again; "
    else:
        again = ""
    return space.function(found.tried[found.best]), (
        f"{again}ceiling {space.name}: chose {found.best}, {found.placement}; searched over {len(found.tried)} "
        f"configurations ({'; '.join(notes)})")


def _kept(run, key: sweeps.SweepKey, candidates) -> tuple[sweeps.Sweep | None, str]:
    """A sweep kept for this key, and where from: this checkout's own earlier runs first
    (.tpucourse/), then the sweeps the course ships for this chip kind and these versions
    (sweeps.COURSE_PATH); none under --resweep."""
    if run.context.resweep:
        return None, ""
    own, course = run.context.sweeps_path, run.context.course_sweeps_path
    if own is not None and (found := sweeps.kept(own, key, candidates)) is not None:
        return found, "kept from an earlier run"
    if course is not None and (found := sweeps.kept(course, key, candidates)) is not None:
        return found, f"the course made on a {key.device_kind} with these versions ({sweeps.COURSE_PATH})"
    return None, ""


def _keep(path, sweep: sweeps.Sweep) -> list[str]:
    """Keep a sweep for later runs; a file that cannot be written costs the next run a sweep, not this one."""
    if path is None:
        return []
    try:
        sweeps.keep(path, sweep)
    except OSError as error:
        return [f"the sweep could not be kept for later runs ({error.strerror or error})"]
    return []
