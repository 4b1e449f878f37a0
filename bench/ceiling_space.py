"""The public ceilings over their real configuration space, on a chip: where each one's best sits.

Gate 03 times JAX's Pallas flash attention and gate 05 splash attention as "the tuned ceiling". This
script maps each kernel's own knobs over a wide space (not only what a gate's sweep offers), so a
gate's candidates can be checked against where the optimum really is:

  flash attention  block_q, block_k_major and its sub-block block_k (forward), and the backward's
                   dkv/dq blocks at the forward's best (forward + backward)
  splash attention block_q, block_kv and block_kv_compute (forward, LocalMask), the fused backward
                   on and off; q scaled in its own dtype and the output in q's dtype, as model code
                   calls it (one custom call)

Each configuration: compiled once, warmed, then timed as `--calls` calls dispatched back to back
before one sync, median of `--samples` samples (per call). A configuration the chip refuses
(VMEM, a Mosaic rule) is a line with its error. Lines go to --out as they are measured, so a run
stopped at its time limit keeps what it measured.

    python bench/ceiling_space.py --out bench/tpu/ceiling-space.jsonl           on a TPU
    python bench/ceiling_space.py --tiny --out /tmp/space.jsonl                  on a CPU: interpret
                                                                                mode, small shapes,
                                                                                the script's own check
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FLASH_TARGETS = ((2, 16, 4096), (1, 8, 8192))  # gate 03: (batch, heads, seq), head_dim 128
WINDOW_TARGETS = ((1, 16, 8192, 1024), (1, 4, 16384, 2048))  # gate 05: (batch, heads, seq, window)
HEAD_DIM = 128


def _median_per_call(fn, args, *, calls: int, samples: int) -> float:
    jax.block_until_ready(fn(*args))
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        out = None
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def _step(forward, backward: bool):
    if not backward:
        return jax.jit(lambda q, k, v, do: forward(q, k, v))

    def fwd_bwd(q, k, v, do):
        out, vjp = jax.vjp(forward, q, k, v)
        return out, vjp(do)

    return jax.jit(fwd_bwd)


def flash(block_q, block_k_major, block_k, *, causal, backward_blocks=None, interpret=False):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    bq_dkv, bk_major_dkv, bk_dkv, bk_major_dq, bk_dq = backward_blocks or (block_q, block_k_major, block_k,
                                                                             block_k_major, block_k)
    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k_major, block_k=block_k, block_b=1,
                          block_q_major_dkv=bq_dkv, block_k_major_dkv=bk_major_dkv, block_k_dkv=bk_dkv,
                          block_q_dkv=bq_dkv, block_k_major_dq=bk_major_dq, block_k_dq=bk_dq,
                          block_q_dq=block_q)

    def forward(q, k, v):
        return fa.flash_attention(q, k, v, causal=causal, sm_scale=q.shape[-1] ** -0.5, block_sizes=sizes,
                                  debug=False)

    return forward


@functools.lru_cache(maxsize=None)
def _splash_kernel(heads, seq, window, block_q, block_kv, block_kv_compute, fused, interpret):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mask = sm.LocalMask((seq, seq), window_size=(window - 1, 0), offset=0)
    backward = dict(block_q_dkv=block_q, block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv_compute)
    if not fused:
        backward.update(block_q_dq=block_q, block_kv_dq=block_kv)
    sizes = sk.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv_compute,
                          use_fused_bwd_kernel=fused, **backward)
    with jax.ensure_compile_time_eval():
        return sk.make_splash_mha(sm.MultiHeadMask([mask] * heads), block_sizes=sizes, head_shards=1,
                                  q_seq_shards=1, interpret=interpret)


def splash(heads, seq, window, block_q, block_kv, block_kv_compute, *, fused=False, interpret=False):
    kernel = _splash_kernel(heads, seq, window, block_q, block_kv, block_kv_compute, fused, interpret)

    def forward(q, k, v):  # model code's form: q scaled in its own dtype, one call per batch element
        q = q * jnp.asarray(q.shape[-1] ** -0.5, q.dtype)
        return jnp.stack([kernel(q[b], k[b], v[b]) for b in range(q.shape[0])]).astype(q.dtype)

    return forward


def flash_space(seq: int, tiny: bool):
    if tiny:
        return [(64, 128, 64), (64, 128, 128), (128, 128, 128)]
    out = []
    for bq, major, minor in itertools.product((512, 1024), (1024, 2048, 4096), (256, 512, 1024)):
        if minor <= major <= seq and major % minor == 0 and bq <= seq and major // minor <= 8:
            out.append((bq, major, minor))
    return out


def splash_space(seq: int, tiny: bool):
    if tiny:
        return [(128, 128, 128), (128, 256, 128)]
    out = []
    for bq, bkv, bkvc in itertools.product((512, 1024, 2048), (512, 1024, 2048, 4096), (256, 512, 1024)):
        if bkvc <= bkv and bkv % bkvc == 0 and bkv <= seq and bq <= seq and bkv // bkvc <= 8:
            out.append((bq, bkv, bkvc))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="small shapes under interpret mode (a CPU)")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--parts", nargs="+", default=["flash-fwd", "splash-fwd", "flash-bwd", "splash-bwd",
                                                        "course"])
    parser.add_argument("--budget", type=float, default=520.0, help="seconds; no new configuration after")
    args = parser.parse_args(argv)
    started = time.monotonic()
    device = jax.devices()[0]
    common = {"date": datetime.date.today().isoformat(), "device_kind": device.device_kind,
              "platform": device.platform, "jax": jax.__version__, "method":
              f"{args.calls} calls dispatched before one sync, median of {args.samples} samples, per call"}
    interpret = args.tiny
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = args.out.open("a")

    def emit(**row):
        out.write(json.dumps({**common, **row}) + "\n")
        out.flush()
        print(json.dumps(row), flush=True)

    def measure(kernel: str, target: dict, config: dict, forward, backward: bool):
        if time.monotonic() - started > args.budget:
            return None
        b, h, s = target["batch"], target["heads"], target["seq"]
        keys = jax.random.split(jax.random.key(0), 4)
        q, k, v, do = (jax.random.normal(key, (b, h, s, HEAD_DIM), jnp.bfloat16) for key in keys)
        try:
            seconds = _median_per_call(_step(forward, backward), (q, k, v, do), calls=args.calls,
                                       samples=args.samples)
            emit(kernel=kernel, backward=backward, **target, config=config, us=round(seconds * 1e6, 1))
            return seconds
        except Exception as error:  # a configuration the chip refuses is a result too
            emit(kernel=kernel, backward=backward, **target, config=config,
                 error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            return None

    flash_targets = [(1, 2, 256)] if args.tiny else FLASH_TARGETS
    window_targets = [(1, 2, 512, 128)] if args.tiny else WINDOW_TARGETS
    if "course" in args.parts and not interpret:
        from pytest_tpucourse import public_kernels

        for (b, h, s), causal, backward in itertools.product(flash_targets, (False, True), (False, True)):
            course = public_kernels.course_solution(REPO, "ch13.backward.flash_attention")
            measure("course-flash", dict(batch=b, heads=h, seq=s, causal=causal), {},
                    functools.partial(course, causal=causal), backward)
        for (b, h, s, w), backward in itertools.product(window_targets, (False, True)):
            course = public_kernels.course_solution(REPO, "ch15.backward.window_attention")
            measure("course-window", dict(batch=b, heads=h, seq=s, window=w), {},
                    functools.partial(course, window=w), backward)
    best_flash = {}
    if "flash-fwd" in args.parts:
        for (b, h, s), causal in itertools.product(flash_targets, (False, True)):
            target = dict(batch=b, heads=h, seq=s, causal=causal)
            results = {}
            for bq, major, minor in flash_space(s, args.tiny):
                if interpret:
                    break
                t = measure("jax-flash", target, dict(block_q=bq, block_k_major=major, block_k=minor),
                            flash(bq, major, minor, causal=causal), False)
                if t is not None:
                    results[(bq, major, minor)] = t
            if results:
                best_flash[(b, h, s, causal)] = min(results, key=results.get)
    if "flash-bwd" in args.parts:
        for (b, h, s), causal in itertools.product(flash_targets, (False, True)):
            if interpret:
                break
            bq, major, minor = best_flash.get((b, h, s, causal), (512, 1024, 512))
            target = dict(batch=b, heads=h, seq=s, causal=causal)
            for dkv_q, dkv_major, dkv_k, dq_major, dq_k in ((512, 512, 512, 512, 512),
                                                             (512, 1024, 512, 1024, 512),
                                                             (1024, 1024, 512, 1024, 512),
                                                             (1024, 1024, 1024, 1024, 1024),
                                                             (512, 2048, 512, 2048, 512),
                                                             (256, 1024, 256, 1024, 256)):
                config = dict(block_q=bq, block_k_major=major, block_k=minor, block_q_dkv=dkv_q,
                              block_k_major_dkv=dkv_major, block_k_dkv=dkv_k, block_k_major_dq=dq_major,
                              block_k_dq=dq_k)
                measure("jax-flash", target, config,
                        flash(bq, major, minor, causal=causal,
                              backward_blocks=(dkv_q, dkv_major, dkv_k, dq_major, dq_k)), True)
    best_splash = {}
    if "splash-fwd" in args.parts:
        for b, h, s, w in window_targets:
            target = dict(batch=b, heads=h, seq=s, window=w)
            results = {}
            for bq, bkv, bkvc in splash_space(s, args.tiny):
                t = measure("splash", target, dict(block_q=bq, block_kv=bkv, block_kv_compute=bkvc),
                            splash(h, s, w, bq, bkv, bkvc, interpret=interpret), False)
                if t is not None:
                    results[(bq, bkv, bkvc)] = t
            if results:
                best_splash[(b, h, s, w)] = min(results, key=results.get)
    if "splash-bwd" in args.parts:
        for b, h, s, w in window_targets:
            target = dict(batch=b, heads=h, seq=s, window=w)
            best = best_splash.get((b, h, s, w), (512, 512, 512))
            for (bq, bkv, bkvc), fused in itertools.product(
                    sorted({best, (512, 512, 512), (512, 1024, 512), (1024, 1024, 512), (256, 512, 256)}),
                    (False, True)):
                if interpret and (bq > s or bkv > s):
                    continue
                measure("splash", target, dict(block_q=bq, block_kv=bkv, block_kv_compute=bkvc, fused=fused),
                        splash(h, s, w, bq, bkv, bkvc, fused=fused, interpret=interpret), True)
    out.close()
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
