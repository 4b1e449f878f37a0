"""Attention on one TPU: the course's flash attention and capstone against JAX's kernels and XLA.

    python bench/attention_sweep.py [--quick] [--suite ch13|ch15] [--out FILE] [--budget SECONDS]
    python bench/attention_sweep.py --dry-run          # any CPU: tiny shapes, interpret mode

Chapter 13 (gate 03's shapes, (B, H, S, D) = (2, 16, 4096, 128) and (1, 8, 8192, 128), bf16,
causal and not, the forward alone and forward + backward): solutions/ch13's flash_attention at
OURS_BLOCKS, JAX's Pallas flash attention (pytest_tpucourse.public_kernels.flash_attention) at
JAX_BLOCKS, and XLA's attention (references.attention_floor, the score matrix materialised).
Chapter 15 (the capstone's targets in solutions/ch15/capstone.toml, sliding windows): the
capstone's window_attention at CAPSTONE_BLOCKS, splash attention (public_kernels.splash_attention,
its local mask) at SPLASH_BLOCKS, and XLA (references.sliding_window_attention_floor).

Method. Every program is compiled first, ahead of time and several at once (threads; XLA's
compiles release the GIL). Each is then timed on the device as one jitted lax.fori_loop of N
calls: every iteration passes the inputs and the previous output through
lax.optimization_barrier, so no call is hoisted out of the loop and none is dropped, and the
last output is returned. N is chosen so that one sample lasts about TARGET_SAMPLE_MS; a loop of
N empty iterations (the barrier alone) is timed the same way and taken off. The time per call is
the median of SAMPLES samples. Before timing, each program's output (out, and dq, dk, dv for
forward + backward) is compared with XLA's at the same shape (with the first public kernel's
where XLA's did not run, out of memory say: `checked_against` names it), as the largest
relative Frobenius error of its arrays; one over MAX_ERROR is reported as wrong, and its time
kept but flagged.

It prints one table per problem and writes every record as JSON (--out). --quick times fewer
configurations; --budget stops timing (and says so) once that many seconds have passed since
the start. --dry-run runs the same path on tiny shapes under TPU interpret mode on any machine,
one sample of one call: a check of the script, whose times mean nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime as dt
import functools
import json
import math
import os
import statistics
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere in the checkout
    sys.path.insert(0, str(ROOT))

GATE03_SHAPES = ((2, 16, 4096, 128), (1, 8, 8192, 128))
OURS_BLOCKS = ((512, 2048), (512, 1024), (512, 4096), (256, 2048), (1024, 2048))
JAX_BLOCKS = ((128, 128), (256, 256), (512, 512), (512, 1024), (1024, 1024))
CAPSTONE_BLOCKS = ((512, 512), (256, 512), (512, 1024), (1024, 512), (128, 128))
SPLASH_BLOCKS = (128, 256, 512)
QUICK = dict(ours=((512, 2048), (512, 4096), (512, 1024)), jax=((512, 512), (512, 1024), (1024, 1024)),
             capstone=((512, 512), (512, 1024)), splash=(128, 512))
# --dry-run: one block of 128 (so interpret mode is quick), one configuration of each kernel, and
# three problems that between them take every path of the script: ch13 forward and causal
# forward + backward, ch15 forward + backward.
DRY_RUN_SHAPE = (1, 1, 128, 128)
DRY_RUN = dict(ours=((128, 128),), jax=((128, 128),), capstone=((128, 128),), splash=(128,))
DRY_RUN_WINDOW = 32
TARGET_SAMPLE_MS = 30.0
SAMPLES = 5
MAX_ERROR = 2e-2  # bf16 flash attention is about 3e-3 off XLA's: far above it is a wrong kernel


@dataclasses.dataclass(frozen=True)
class Problem:
    """One timed problem: a shape, a mask, and the forward alone or forward + backward."""

    suite: str  # "ch13" or "ch15"
    shape: tuple  # (B, H, S, D), q, k and v alike
    causal: bool
    window: int | None
    backward: bool

    @property
    def label(self) -> str:
        mask = f"window {self.window}" if self.window else ("causal" if self.causal else "non-causal")
        return (f"{self.suite} {'x'.join(map(str, self.shape))} {mask} "
                f"{'fwd+bwd' if self.backward else 'fwd'}")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One implementation at one configuration: attention(q, k, v) -> out."""

    impl: str  # "ours", "jax-flash", "xla", "capstone", "splash"
    config: str
    attention: object = dataclasses.field(compare=False)


def candidates(problem: Problem, sizes: dict, dry_run: bool) -> list[Candidate]:
    """XLA first (the reference every other output is checked against), then the kernels."""
    from pytest_tpucourse import public_kernels, references

    seq = problem.shape[2]
    fit = lambda *blocks: tuple(min(b, seq) for b in blocks)  # noqa: E731 - clamp to a short sequence
    if problem.suite == "ch13":
        ours = public_kernels.course_solution(ROOT, "ch13.backward.flash_attention")
        found = [Candidate("xla", "-", functools.partial(references.attention_floor, causal=problem.causal))]
        found += [Candidate("jax-flash", f"{bq}x{bkv}", functools.partial(
            public_kernels.flash_attention, causal=problem.causal, block_q=bq, block_kv=bkv))
            for bq, bkv in dict.fromkeys(fit(*b) for b in sizes["jax"])]
        found += [Candidate("ours", f"{bq}x{bkv}", functools.partial(
            ours, causal=problem.causal, block_q=bq, block_kv=bkv))
            for bq, bkv in dict.fromkeys(fit(*b) for b in sizes["ours"])]
        return found
    window_attention = public_kernels.course_solution(ROOT, "ch15.backward.window_attention")
    block_sizes = public_kernels.course_solution(ROOT, "ch15.forward.BlockSizes")

    def floor(q, k, v):
        return references.sliding_window_attention_floor(q, k, v, window=problem.window)[0]

    found = [Candidate("xla", "-", floor)]
    found += [Candidate("splash", f"{b}", functools.partial(
        public_kernels.splash_attention, window=problem.window, block=b))
        for b in dict.fromkeys(fit(b)[0] for b in sizes["splash"])]
    found += [Candidate("capstone", f"{bq}x{bkv}", functools.partial(
        window_attention, window=problem.window, blocks=block_sizes(bq, bkv)))
        for bq, bkv in dict.fromkeys(fit(*b) for b in sizes["capstone"])]
    return found


def problems(quick: bool, dry_run: bool, suite: str = "all") -> list[Problem]:
    return [p for p in _problems(quick, dry_run) if suite in ("all", p.suite)]


def _problems(quick: bool, dry_run: bool) -> list[Problem]:
    if dry_run:
        return [Problem("ch13", DRY_RUN_SHAPE, False, None, False),
                Problem("ch13", DRY_RUN_SHAPE, True, None, True),
                Problem("ch15", DRY_RUN_SHAPE, True, DRY_RUN_WINDOW, True)]
    found = []
    for shape in GATE03_SHAPES:
        for causal in (False, True):
            for backward in (False, True):
                found.append(Problem("ch13", shape, causal, None, backward))
    manifest = tomllib.loads((ROOT / "solutions" / "ch15" / "capstone.toml").read_text())
    targets = [(tuple(t[k] for k in ("batch", "heads", "seq", "head_dim")), t["options"]["window"])
               for t in manifest["targets"]]
    if quick:
        targets = targets[:1]
    for shape, window in targets:
        for backward in (False, True):
            found.append(Problem("ch15", shape, True, window, backward))
    return found


def step_of(attention, backward: bool):
    """step(q, k, v, do): out, or (out, (dq, dk, dv)) for the cotangent dO."""
    import jax

    if not backward:
        return lambda q, k, v, do: attention(q, k, v)

    def step(q, k, v, do):
        out, pullback = jax.vjp(attention, q, k, v)
        return out, pullback(do)
    return step


def timed_loop(step, inputs):
    """loop(inputs, n): n calls of step in one lax.fori_loop; the last output. step=None: the
    empty loop, the barrier alone."""
    import jax
    import jax.numpy as jnp

    shapes = jax.eval_shape(step, *inputs) if step is not None else None

    def loop(inputs, n):
        def body(_, carry):
            inputs, out = jax.lax.optimization_barrier(carry)
            return inputs, (step(*inputs) if step is not None else out)
        first = (jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes) if step is not None
                 else jnp.zeros((), jnp.float32))
        return jax.lax.fori_loop(0, n, body, (inputs, first))[1]
    return jax.jit(loop)


def relative_errors(got, want) -> float:
    """The largest relative Frobenius error over the arrays of an output (out; dq, dk, dv)."""
    import jax
    import numpy as np

    worst = 0.0
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        denominator = np.linalg.norm(b)
        error = np.linalg.norm(a - b) / denominator if denominator else np.linalg.norm(a - b)
        worst = max(worst, float(error) if np.isfinite(error) else math.inf)
    return worst


def seconds(fn, *args) -> float:
    import jax

    import numpy as np

    args = [np.int32(a) if isinstance(a, int) else a for a in args]
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def run(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas import tpu as pltpu

    start = time.monotonic()
    device = jax.devices()[0]
    dry_run = args.dry_run
    if not dry_run and device.platform != "tpu":
        raise SystemExit(f"attention_sweep: this is a {device.platform} ({device.device_kind}); the sweep "
                         f"times kernels on a TPU (--dry-run checks the script anywhere)")
    full = dict(ours=OURS_BLOCKS, jax=JAX_BLOCKS, capstone=CAPSTONE_BLOCKS, splash=SPLASH_BLOCKS)
    sizes = DRY_RUN if dry_run else QUICK if args.quick else full
    samples, target_ms = (1, 0.0) if dry_run else (args.samples, TARGET_SAMPLE_MS)
    interpret = pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()) if dry_run else None
    if interpret is not None:
        interpret.__enter__()
    records = []
    pool = None
    try:
        work = [(p, c) for p in problems(args.quick, dry_run, args.suite)
                for c in candidates(p, sizes, dry_run)]
        inputs = {}

        def inputs_of(problem):
            key = problem.shape
            if key not in inputs:
                keys = jax.random.split(jax.random.PRNGKey(0), 4)
                inputs[key] = tuple(jax.random.normal(kk, problem.shape, jnp.bfloat16) for kk in keys)
            return inputs[key]

        def compile_one(item):
            problem, candidate = item
            shapes = tuple(jax.ShapeDtypeStruct(problem.shape, jnp.bfloat16) for _ in range(4))
            count = jax.ShapeDtypeStruct((), jnp.int32)
            step = step_of(candidate.attention, problem.backward) if candidate else None
            began = time.monotonic()
            try:
                compiled = timed_loop(step, shapes).lower(shapes, count).compile()
            except Exception as error:  # a configuration the compiler refuses (VMEM, say): recorded
                return None, f"{type(error).__name__}: {str(error).splitlines()[0][:300]}", 0.0
            return compiled, None, time.monotonic() - began

        empties = {(p.shape, p.backward): (p, None) for p, _ in work}  # one per input and output shape
        # Each problem's programs (its empty loop first) in the order they are timed: the compiles
        # run ahead on a pool while earlier problems are timed on the device.
        everything = []
        for problem in dict.fromkeys(p for p, _ in work):
            empty = empties[problem.shape, problem.backward]
            everything += ([empty] if empty not in everything else []) + [w for w in work if w[0] == problem]
        workers = 1 if dry_run else max(1, min(args.compile_threads, len(everything)))
        print(f"compiling {len(everything)} programs on {workers} threads, timing each problem as its "
              f"programs are ready ...", flush=True)
        pool = concurrent.futures.ThreadPoolExecutor(workers) if workers > 1 else None
        pending = {_key(item): pool.submit(compile_one, item) for item in everything} if pool else {}

        def built(item):
            if pool is None:  # in this thread: the interpret mode of a dry run is this thread's setting
                if _key(item) not in pending:
                    pending[_key(item)] = compile_one(item)
                return pending[_key(item)]
            return pending[_key(item)].result()

        def per_call(compiled, empty, data, n):
            """Seconds per call: a sample of n calls minus n empty iterations."""
            return (seconds(compiled, data, n) - seconds(empty, data, n)) / n

        for problem in dict.fromkeys(p for p, _ in work):
            if time.monotonic() - start > args.budget:
                empty = None
            else:
                data = inputs_of(problem)
                empty = built(empties[problem.shape, problem.backward])[0]
            reference = against = None
            for problem_, candidate in [w for w in work if w[0] == problem]:
                record = dict(suite=problem.suite, shape=list(problem.shape), causal=problem.causal,
                              window=problem.window, step="fwd+bwd" if problem.backward else "fwd",
                              impl=candidate.impl, config=candidate.config)
                records.append(record)
                if empty is None or time.monotonic() - start > args.budget:
                    record.update(status="skipped", error=f"time budget of {args.budget:.0f} s spent")
                    continue
                compiled, error, compile_s = built((problem, candidate))
                record["compile_s"] = round(compile_s, 1)
                if error:
                    record.update(status="failed", error=error)
                    continue
                try:
                    out = jax.block_until_ready(compiled(data, np.int32(1)))
                    if reference is None and candidate.impl in ("xla", "jax-flash", "splash"):
                        reference, against = out, f"{candidate.impl} {candidate.config}".rstrip(" -")
                    record.update(checked_against=against, rel_error=relative_errors(out, reference))
                    del out
                    estimate = per_call(compiled, empty, data, 4) if target_ms else 0.0
                    n = max(1, min(4000, round(target_ms / 1e3 / estimate))) if estimate > 0 else 1
                    times = sorted(per_call(compiled, empty, data, n) * 1e3 for _ in range(samples))
                except Exception as error:  # out of memory, say: recorded, the sweep goes on
                    record.update(status="failed", error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
                    continue
                wrong = record["rel_error"] > MAX_ERROR
                record.update(status="wrong" if wrong else "ok", n=n, ms=statistics.median(times),
                              samples_ms=[round(t, 5) for t in times])
            del reference, against
            print_table(problem, [r for r in records if _same_problem(r, problem)])
    finally:
        if interpret is not None:
            interpret.__exit__(None, None, None)
        if pool is not None:  # compiles not yet started are dropped; running ones finish
            pool.shutdown(wait=False, cancel_futures=True)
    return dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        device=device.device_kind, platform=device.platform, jax=jax.__version__,
        command=" ".join([Path(sys.argv[0]).name] + sys.argv[1:]), dry_run=dry_run,
        method=(f"jitted lax.fori_loop of N calls, inputs and output through lax.optimization_barrier "
                f"each iteration, N for about {TARGET_SAMPLE_MS:.0f} ms a sample, the empty loop's time "
                f"taken off, median of {samples} samples"),
        seconds=round(time.monotonic() - start, 1), records=records)


def _key(item):
    problem, candidate = item
    return problem, (candidate.impl, candidate.config) if candidate else None


def _same_problem(record, problem) -> bool:
    return (record["suite"], tuple(record["shape"]), record["causal"], record["window"],
            record["step"]) == (problem.suite, problem.shape, problem.causal, problem.window,
                                "fwd+bwd" if problem.backward else "fwd")


def print_table(problem: Problem, records: list[dict]) -> None:
    """One problem's rows, fastest first, each against XLA and the fastest public kernel."""
    timed = [r for r in records if r.get("ms") is not None]
    xla = next((r["ms"] for r in timed if r["impl"] == "xla"), None)
    public = [r["ms"] for r in timed if r["impl"] in ("jax-flash", "splash") and r["status"] == "ok"]
    best = min(public) if public else None
    print(f"\n{problem.label}")
    print(f"  {'impl':<10} {'blocks':<10} {'ms':>9} {'/ XLA':>7} {'/ best public':>13} {'rel error':>10}  status")
    for r in sorted(records, key=lambda r: r.get("ms", math.inf)):
        ms = r.get("ms")
        ratio = lambda base: f"{ms / base:.2f}" if ms is not None and base else "-"  # noqa: E731
        error = r.get("rel_error")
        print(f"  {r['impl']:<10} {r['config']:<10} {ms if ms is not None else math.nan:>9.3f} "
              f"{ratio(xla):>7} {ratio(best):>13} {error if error is not None else math.nan:>10.1e}  "
              f"{r['status']}" + (f": {r['error']}" if r.get("error") else "")
              + (f" (checked against {r['checked_against']})" if r.get("checked_against", "xla") != "xla" else ""),
              flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer configurations, the first capstone target")
    parser.add_argument("--out", help="write the records as JSON here")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny shapes under TPU interpret mode, one sample: checks the script on any machine")
    parser.add_argument("--budget", type=float, default=330.0,
                        help="stop timing after this many seconds since the start (default 330)")
    parser.add_argument("--suite", choices=("all", "ch13", "ch15"), default="all",
                        help="chapter 13's problems, chapter 15's, or both (default)")
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--compile-threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    result = run(args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {len(result['records'])} records to {args.out}")
    print(f"done in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
