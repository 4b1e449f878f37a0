"""Graded tests for ch15.autotune: the block-size autotuning pass and its per-chip cache.

Nothing is timed here (off a TPU a time says nothing about a TPU): the sweep is given a
timer, a deterministic stand-in that makes the largest blocks fastest, so a pass that
offers a configuration the chip cannot hold would pick it. What is checked:

  - every candidate divides the lengths and fits the chip's scoped VMEM, judged by the
    course's own footprint model (pytest_tpucourse.readers.vmem_footprint) of every kernel the
    learner's forward and backward run at those blocks;
  - the sweep writes one record per (problem, configuration), and the winner of each
    problem is its fastest record, under a second timer too, whose fastest configuration
    sits inside the order the candidates are tried in (neither first nor last);
  - every record the sweep writes was timed: the timer it is given sees each (problem,
    configuration) at least once (in any order, as often as the pass likes);
  - the winners round-trip through the cache file (Tokamax's layout: one JSON file per
    device kind and op), and window_attention(blocks=None) reads them at call time;
  - tuned_blocks answers with the least median time whichever configuration holds it: over
    rounds of one cache whose times are rotated, each configuration is the fastest once, so
    an answer chosen by anything but the times (the largest blocks, a position in the file)
    is wrong in some round.
"""

import json
import math

import jax
import numpy as np
import pytest

from pytest_tpucourse import ir, checks, tpu
from pytest_tpucourse import strategies as tst
from pytest_tpucourse.checks import WrongResult

CHIP = "v5e"
# head_dim 512 in float32: big blocks stop fitting v5e's 16 MiB scoped VMEM.
BIG = dict(q_shape=(1, 1, 2048, 512), k_shape=(1, 1, 2048, 512), dtype="float32", window=512)
SMALL = dict(q_shape=(1, 2, 1024, 64), k_shape=(1, 2, 1024, 64), dtype="bfloat16", window=256)
# q shorter than kv, with lengths that different blocks divide (384 = 3 x 128): a pass that
# takes one length for both, or files the problem under the wrong shape, shows here.
UNEQUAL = dict(q_shape=(1, 2, 384, 128), k_shape=(1, 2, 1024, 128), dtype="bfloat16", window=192)
# The other way round: 256 and 512 divide the q length but not the kv length (640 = 5 x 128), so
# a pass that checks block_kv against the q length, or against nothing, shows here.
KV_ODD = dict(q_shape=(1, 1, 512, 64), k_shape=(1, 1, 640, 64), dtype="bfloat16", window=128)
PROBLEMS = (BIG, SMALL, UNEQUAL, KV_ODD)


def fake_time_ms(problem, config):
    """Larger blocks are 'faster': a pass that ignores VMEM would pick what cannot run."""
    return 1e6 / (config["block_q"] * config["block_kv"]) + 0.001 * config["block_q"]


def middle_fastest_ms(problem, config):
    """(256, 256) is fastest, the slower the farther from it: the fastest candidate sits inside
    any order by size the candidates are tried in, so a winner taken by position shows."""
    return (abs(math.log2(config["block_q"]) - 8) + abs(math.log2(config["block_kv"]) - 8)
            + 0.001 * config["block_q"] + 0.0001 * config["block_kv"])


def _candidates(impl, problem):
    return impl.autotune.candidates(problem["q_shape"], problem["k_shape"], problem["dtype"],
                                    window=problem["window"], chip=CHIP)


def _footprints(impl, problem, config):
    """VMEM bytes of each kernel of forward + backward at these blocks (course model)."""
    blocks = impl.forward.BlockSizes.resolve()(config["block_q"], config["block_kv"])
    q = jax.ShapeDtypeStruct(problem["q_shape"], problem["dtype"])
    k = jax.ShapeDtypeStruct(problem["k_shape"], problem["dtype"])
    grad = checks.gradient(impl.backward.window_attention, window=problem["window"], blocks=blocks)
    return [ir.footprint_bytes(b) for b in ir.kernel_buffers(grad.jaxpr(q, k, k))]


def test_candidates_fit_the_chip(impl):
    limit = tpu.SCOPED_VMEM_LIMITS[CHIP]
    for problem in PROBLEMS:
        found = _candidates(impl, problem)
        if not found or not any(c["block_q"] != c["block_kv"] for c in found):
            raise WrongResult(f"candidates({problem}) offers {found}: it must offer several "
                              f"configurations, unequal block sizes among them")
        for config in found:
            if problem["q_shape"][2] % config["block_q"] or problem["k_shape"][2] % config["block_kv"]:
                raise WrongResult(f"candidates({problem}) offers {config}, which does not divide "
                                  f"the lengths")
            worst = max(_footprints(impl, problem, config))
            if worst > limit:
                raise WrongResult(
                    f"candidates({problem}) offers {config}: one of its kernels takes "
                    f"{worst / 2**20:.1f} MiB of VMEM (every block double-buffered, each scratch "
                    f"once), over the {limit / 2**20:.0f} MiB scoped limit of a {CHIP}. Count "
                    f"every pipelined block twice, the scratch once, and the score tiles.")


@pytest.mark.parametrize("time_ms", [fake_time_ms, middle_fastest_ms], ids=["largest-fastest", "middle-fastest"])
def test_sweep_records_every_configuration_and_picks_the_fastest(impl, time_ms):
    timed = []

    def timer(problem, config):
        timed.append((problem, config))
        return time_ms(problem, config)

    records = impl.autotune.sweep(list(PROBLEMS), chip=CHIP, time_ms=timer)
    for problem in PROBLEMS:
        expected = _candidates(impl, problem)
        asked = [c for p, c in timed if _same_fields(p, problem)]
        never = [c for c in expected if not any(_same_fields(a, c) for a in asked)]
        if never:
            raise WrongResult(f"sweep() never timed {never[0]} for {problem}: time_ms was called for "
                              f"{len(expected) - len(never)} of its {len(expected)} candidates. A "
                              f"configuration's time is what the timer measures, so every candidate "
                              f"must be timed before the fastest can be known")
        mine = [r["config"] for r in records if r["problem"] == problem]
        if sorted(map(str, mine)) != sorted(map(str, expected)) or len(mine) != len(expected):
            raise WrongResult(f"sweep() wrote {len(mine)} records for {problem}; expected one per "
                              f"candidate configuration ({len(expected)})")
        for r in records:
            if r["chip"] != CHIP or not np.isclose(r["median_ms"], time_ms(r["problem"], r["config"])):
                raise WrongResult(f"sweep() record {r}: expected chip {CHIP!r} and the timer's "
                                  f"median_ms")
    best = impl.autotune.winners(records)
    for problem in PROBLEMS:
        fastest = min(_candidates(impl, problem), key=lambda c: time_ms(problem, c))
        key = impl.autotune.problem_key(problem["q_shape"], problem["k_shape"], problem["dtype"],
                                        problem["window"])
        if best.get(key) != fastest:
            raise WrongResult(f"winners(): {best.get(key)} for {problem}; the fastest record is "
                              f"{fastest}")


def test_cache_is_read_at_call_time(impl, tmp_path, monkeypatch):
    """Winners written for this device kind change the blocks window_attention(blocks=None) uses."""
    device_kind = jax.devices()[0].device_kind
    problem = dict(q_shape=(1, 1, 256, 64), k_shape=(1, 1, 512, 64), dtype="float32", window=128)
    records = [dict(problem=problem, config=dict(block_q=bq, block_kv=bkv), chip=CHIP, median_ms=t)
               for bq, bkv, t in ((128, 128, 2.0), (256, 64, 1.0), (64, 64, 3.0))]
    path = impl.autotune.write_cache(records, tmp_path, device_kind)
    expected_path = tmp_path / device_kind.lower().replace(" ", "_") / "window_attention.json"
    if str(path) != str(expected_path) or not expected_path.is_file():
        raise WrongResult(f"write_cache() wrote {path}; the cache file is {expected_path}")
    stored = json.loads(expected_path.read_text())
    entry = stored.get(impl.autotune.problem_key(**problem))
    if not entry or {json.dumps(r["config"], sort_keys=True) for r in records} != set(entry):
        raise WrongResult(f"write_cache(): {expected_path} maps the problem's JSON to {entry}; "
                          f"expected each configuration's JSON with its median_evaluation_time_ms")
    tuned = impl.autotune.tuned_blocks(problem["q_shape"], problem["k_shape"], problem["dtype"],
                                       problem["window"], device_kind=device_kind, directory=tmp_path)
    if tuned != dict(block_q=256, block_kv=64):
        raise WrongResult(f"tuned_blocks() read {tuned}; the fastest cached is block_q 256, block_kv 64")
    monkeypatch.setenv(impl.autotune.load().CACHE_ENV, str(tmp_path))
    q = tst.random_array(problem["q_shape"], "float32", 0)
    kv = tst.random_array(problem["k_shape"], "float32", 1)
    log = ir.fetch_log(impl.backward.window_attention.jaxpr(q, kv, kv, window=128))
    q_blocks = {f.block_sizes[2] for f in log if f.operand == 0}
    if q_blocks != {256}:
        raise WrongResult(f"window_attention(q, k, v, window=128) (q {problem['q_shape']}, k and v "
                          f"{problem['k_shape']}) with blocks=None ran q blocks of "
                          f"{sorted(q_blocks)} rows; the cache for {device_kind!r} says 256")


def _same_fields(given, wanted):
    """Whether what the pass handed the timer names `wanted`: each of its fields, equal as data."""
    try:
        return all(_plain(given[k]) == _plain(v) for k, v in wanted.items())
    except (KeyError, TypeError, IndexError):
        return False


def _plain(value):
    """A problem or configuration as comparable data (lists and tuples alike, dtypes by name)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    return str(value)


def _blocks(config):
    """A configuration as the README writes it, whatever order its keys come in."""
    if isinstance(config, dict) and set(config) == {"block_q", "block_kv"}:
        return f"{{'block_q': {config['block_q']}, 'block_kv': {config['block_kv']}}}"
    return repr(config)


# Configurations of one cached problem, none of them the fastest by its size or its place: the
# times are rotated over them, round by round.
ROTATED = [dict(block_q=64, block_kv=64), dict(block_q=128, block_kv=256), dict(block_q=256, block_kv=128),
           dict(block_q=256, block_kv=512), dict(block_q=512, block_kv=256)]


def test_tuned_blocks_answers_the_fastest_cached(impl, tmp_path):
    """Each configuration is the fastest in one round: a rule that does not read the times gives
    one answer every round, wrong in all but (at most) one."""
    device_kind = "TPU v5 lite"
    problem = dict(q_shape=(1, 2, 1024, 64), k_shape=(1, 2, 1024, 64), dtype="bfloat16", window=256)
    key = impl.autotune.problem_key(problem["q_shape"], problem["k_shape"], problem["dtype"], problem["window"])
    rounds = []
    for shift, fastest in enumerate(ROTATED):
        times = {json.dumps(c, sort_keys=True): 1.0 + ((i - shift) % len(ROTATED)) * 0.25
                 for i, c in enumerate(ROTATED)}
        directory = tmp_path / f"round{shift}"
        path = directory / device_kind.lower().replace(" ", "_") / "window_attention.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({key: {c: {"median_evaluation_time_ms": t} for c, t in times.items()}},
                                   indent=1, sort_keys=True))
        tuned = impl.autotune.tuned_blocks(problem["q_shape"], problem["k_shape"], problem["dtype"],
                                           problem["window"], device_kind=device_kind, directory=directory)
        rounds.append((tuned, fastest, times))
    wrong = [(tuned, fastest, times) for tuned, fastest, times in rounds if tuned != fastest]
    if not wrong:
        return
    tuned, fastest, times = wrong[0]
    mine = times.get(json.dumps(tuned, sort_keys=True)) if isinstance(tuned, dict) else None
    if all(answer == tuned for answer, _, _ in rounds):
        cause = f"it answers {_blocks(tuned)} in all {len(rounds)} rounds, whichever configuration the times make fastest"
        if tuned == max(ROTATED, key=lambda c: (c["block_q"] * c["block_kv"], c["block_q"])):
            cause += ": the largest blocks cached, as if they were always the fastest"
    else:
        cause = "it does not answer the least median_evaluation_time_ms"
    raise WrongResult(
        f"tuned_blocks() read {_blocks(tuned)} from a cache that times {_blocks(fastest)} at 1.0 ms"
        + (f" and {_blocks(tuned)} at {mine} ms" if mine is not None else "")
        + f" ({len(wrong)} of {len(rounds)} rounds, the times rotated over {len(ROTATED)} configurations): "
          f"{cause}. Pick the configuration with the least median_evaluation_time_ms; its size and its "
          f"place in the file say nothing about its speed.")


def _timer():
    return fake_time_ms


def _sweep_and_winners(graded, problems, time_ms):
    """What the pass offers, records and picks for the problems, as plain data (the tree's
    candidates, sweep and winners under the stand-in timer)."""
    import importlib

    autotune = importlib.import_module(".autotune", graded.module.load().__package__)
    offered = [autotune.candidates(p["q_shape"], p["k_shape"], p["dtype"], window=p["window"], chip=CHIP)
               for p in problems]
    records = graded(list(problems), chip=CHIP, time_ms=time_ms)
    keys = [autotune.problem_key(p["q_shape"], p["k_shape"], p["dtype"], p["window"]) for p in problems]
    return {"offered": offered, "records": records, "winners": autotune.winners(records), "keys": keys}


def _sweep_right(got, problems):
    """One record per offered configuration, each with the timer's time; each problem's winner the
    fastest; every offer dividing the lengths and some unequal (fitting VMEM is the tree's own
    process's to judge: it needs the tree's kernels)."""
    for problem, offered, key in zip(problems, got["offered"], got["keys"]):
        problem = {k: tuple(v) if isinstance(v, list) else v for k, v in problem.items()}
        assert offered and any(c["block_q"] != c["block_kv"] for c in offered), (
            f"candidates({problem}) offers {offered}: several configurations, unequal blocks among them")
        for config in offered:
            assert not (problem["q_shape"][2] % config["block_q"] or problem["k_shape"][2] % config["block_kv"]), (
                f"candidates({problem}) offers {config}, which does not divide the lengths")
        mine = [r["config"] for r in got["records"] if _same_problem(r["problem"], problem)]
        assert sorted(map(str, mine)) == sorted(map(str, offered)), (
            f"sweep() wrote {len(mine)} records for {problem}; expected one per candidate ({len(offered)})")
        for r in got["records"]:
            assert r["chip"] == CHIP and np.isclose(r["median_ms"], fake_time_ms(r["problem"], r["config"])), (
                f"sweep() record {r}: expected chip {CHIP!r} and the timer's median_ms")
        fastest = min(offered, key=lambda c: fake_time_ms(problem, c))
        assert got["winners"].get(key) == fastest, f"winners() picks {got['winners'].get(key)} for {problem}; the fastest is {fastest}"


def _same_problem(a, b):
    return {k: tuple(v) if isinstance(v, list) else v for k, v in a.items()} == b


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): the pass on problems the grader
    draws, under the stand-in timer."""
    problems = []
    for _ in range(2):
        head_dim, dtype = int(rng.choice((64, 128))), str(rng.choice(("bfloat16", "float32")))
        q_len, kv_len = int(rng.choice((256, 384, 512, 1024))), int(rng.choice((512, 1024)))
        problems.append(dict(q_shape=(1, int(rng.integers(1, 3)), q_len, head_dim), k_shape=(1, 1, kv_len, head_dim),
                             dtype=dtype, window=int(rng.choice((64, 192, 256)))))
    return [checks.trusted.exact("sweep", (problems, checks.trusted.built(_timer, label="the stand-in timer")),
                                 through=_sweep_and_winners, expected=problems,
                                 compare=checks.trusted.passes(_sweep_right), label=f"sweep of {len(problems)} problems")]


TRUSTED = checks.trusted.Cases(_trusted_cases)
