"""Chapter 8's arithmetic judged by the real TPU compiler (libtpu, the tpu-compile extra).

Each check compiles a kernel ahead of time for a described chip (tpu_compile) and reads
what the compiler decided; nothing runs and nothing is timed.

- VMEM: a kernel compiled with a scoped limit (`vmem_limit_bytes`) above its scratch
  and below what it needs is refused with E1001, which names the bytes it needed. The
  number counts the whole kernel once the limit is above its scratch: with a lower
  limit the compiler stops at the scratch and names that alone.
- Blocks: chapter 11's matmul schedule at picked blocks, compiled with
  `vmem_limit_bytes` set to the limit they were picked for. The compiler takes a
  kernel that needs exactly its limit, and refuses one that needs a byte more.
- MXU: the `vmatmul` instructions in the final bundles of a one-block matmul. On
  v5e and v6e (libtpu 0.0.42.1) a bf16 (m, k) @ (k, n) block takes
  ceil(m / 16) * ceil(k / W) * ceil(n / W) of them: one push of a 16-row bf16 vreg
  through one W x W weight tile of the MXU.

Measured (libtpu 0.0.42.1 and 0.0.50.1, v5e): the compiler adds an internal scratch of its
own, u32[72, 128] = 36,864 bytes, to some kernels that compute on bf16 blocks of fewer than 8
rows (a bf16 add of 2-row blocks, a bias add of a 1-row bf16 block), not to others (an add of
1-row bf16 blocks); a plain copy of such blocks has none. XLA may also place a small operand
whole in VMEM before the kernel starts (a bf16 batched matmul of 3 x 80 x 384: `copy-start`
to memory space S(1)), and the kernel then has no window for it; the kernels these checks
compile were chosen to keep their windows.
"""

from __future__ import annotations

from ..chips import Chip
from ..core.outcomes import WrongResult
from ..grading.context import resolve_chip

# The compiler's internal scratch for bf16 arithmetic on blocks under 8 rows (see above).
BF16_SMALL_BLOCK_SCRATCH_BYTES = 72 * 128 * 4
BF16_PUSH_ROWS = 16  # rows of a bf16 vreg: 8 sublanes, 2 values packed in each 32-bit word


def matmul_schedule(bm: int, bk: int, bn: int, *, vmem_limit_bytes: int | None = None):
    """Chapter 11's matmul as a function of (x, y): grid (M/bm, N/bn, K/bk), x, y and the output
    double-buffered, a (bm, bn) f32 accumulator; `vmem_limit_bytes` is handed to the compiler."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def matmul(x, y):
        (m, k), n = x.shape, y.shape[1]
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
            compiler_params=pltpu.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary"),
                vmem_limit_bytes=vmem_limit_bytes))(x, y)

    return matmul


def one_block_matmul(x, y):
    """(m, k) @ (k, n) in a single grid step, f32 result: every vmatmul the compiler issues is the block's."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), jnp.float32))(x, y)


def vmem_needed_bytes(kernel, *args, chip: Chip) -> int:
    """The VMEM bytes the compiler for `chip` says `kernel` needs, from its E1001 refusal.

    The kernel must carry a `vmem_limit_bytes` above its scratch and below its need; one
    that compiles, or fails otherwise, is a mistake of the caller (RuntimeError).
    """
    from ..compiler import libtpu

    try:
        libtpu.compile_for(kernel, *args, chip=chip)
    except libtpu.TpuCompileError as error:
        if error.kind != "vmem":
            raise RuntimeError(f"the kernel was to be refused for its VMEM, and failed otherwise: {error}") from None
        return error.vmem_needed_bytes
    raise RuntimeError("the kernel compiled: give it a vmem_limit_bytes below what it needs")


def compiler_allowance(buffers) -> int:
    """Bytes the compiler may add to a kernel's buffers (vmem_footprint.Buffer): its internal
    scratch where a bf16 block has fewer than 8 rows."""
    def rows(shape):
        return shape[-2] if len(shape) >= 2 else 1

    small_bf16 = any(b.dtype == "bfloat16" and rows(b.shape) < 8 for b in buffers if not b.name.startswith("scratch"))
    return BF16_SMALL_BLOCK_SCRATCH_BYTES if small_bf16 else 0


def assert_footprint_matches_compiler(fn, got, kernel, args, *, what: str, chip: Chip | str | None = None,
                                      note: str = "") -> None:
    """fn's answer `got` for kernel's VMEM must be the bytes the compiler needed (vmem_needed_bytes),
    less the compiler's own internal scratch where it adds one (compiler_allowance)."""
    import jax
    import numpy as np

    from .. import checks
    from ..readers import vmem_footprint

    chip = resolve_chip(chip)
    needed = vmem_needed_bytes(kernel, *args, chip=chip)
    (buffers,) = vmem_footprint.kernel_buffers(jax.make_jaxpr(kernel)(*args))
    allowance = compiler_allowance(buffers)
    counted = (f"the {chip.name} compiler's E1001 count, {needed:,} bytes" + (
        f", less the {allowance:,}-byte internal scratch it adds for a bf16 block under 8 rows" if allowance else ""))
    checks.assert_close(np.asarray(got), np.int64(needed - allowance), fn=fn, dtype="int64",
                        what=f"VMEM bytes of {what}, against {counted}", note=note)


def assert_blocks_compile(fn, blocks, m: int, k: int, n: int, *, dtype, chip: Chip | str, vmem_limit_bytes: int,
                          note: str = "") -> None:
    """Chapter 11's matmul at `blocks` (fn's pick) must compile for `chip` under vmem_limit_bytes."""
    import jax
    import jax.numpy as jnp

    from ..compiler import libtpu
    from ..readers.reproduction import reproduction

    chip = resolve_chip(chip)
    bm, bk, bn = blocks
    args = (jax.ShapeDtypeStruct((m, k), jnp.dtype(dtype)), jax.ShapeDtypeStruct((k, n), jnp.dtype(dtype)))
    suffix = reproduction(fn, note=note)
    try:
        libtpu.compile_for(matmul_schedule(bm, bk, bn, vmem_limit_bytes=vmem_limit_bytes), *args, chip=chip)
    except libtpu.TpuCompileError as error:
        if error.kind == "vmem":
            raise WrongResult(
                f"{fn.display} picked ({bm}, {bk}, {bn}) for a {m}x{k}x{n} {jnp.dtype(dtype).name} matmul; the "
                f"{chip.name} compiler refuses chapter 11's matmul at these blocks under vmem_limit_bytes="
                f"{vmem_limit_bytes:,}: it needs {error.vmem_needed_bytes:,} bytes ({error.code}).{suffix}") from None
        raise WrongResult(f"{fn.display} picked ({bm}, {bk}, {bn}); the {chip.name} compiler refuses chapter 11's "
                          f"matmul at these blocks: {error}{suffix}") from None


def vmatmuls(m: int, k: int, n: int, *, chip: Chip | str, dtype="bfloat16") -> int:
    """The vmatmul instructions in the final bundles of one_block_matmul on (m, k) @ (k, n)."""
    import jax
    import jax.numpy as jnp

    from ..compiler import libtpu

    x, y = jax.ShapeDtypeStruct((m, k), jnp.dtype(dtype)), jax.ShapeDtypeStruct((k, n), jnp.dtype(dtype))
    return libtpu.compile_for(one_block_matmul, x, y, chip=resolve_chip(chip), dumps=True).kernel().mxu_ops


def assert_efficiency_matches_vmatmuls(fn, m: int, k: int, n: int, *, chip: Chip | str, mxu_width: int) -> None:
    """fn(m, k, n, mxu_width=W, sublanes=16), an MXU efficiency with bf16's 16-row pushes, must be
    the useful MACs over the MACs the compiler's vmatmuls can do: m * k * n / (vmatmuls * 16 * W * W)."""
    import numpy as np

    from .. import checks

    chip = resolve_chip(chip)
    pushes = vmatmuls(m, k, n, chip=chip)
    capacity = pushes * BF16_PUSH_ROWS * mxu_width * mxu_width
    got = fn(m, k, n, mxu_width=mxu_width, sublanes=BF16_PUSH_ROWS)
    checks.assert_close(np.float64(got) if isinstance(got, (int, float)) else got, np.float64(m * k * n / capacity),
                        fn=fn, dtype="float64",
                        what=(f"MXU efficiency (sublanes={BF16_PUSH_ROWS}) of a bf16 ({m}, {k}) @ ({k}, {n}) on {chip.name}, against the compiler's "
                              f"{pushes} vmatmul (each a {BF16_PUSH_ROWS}-row push through a {mxu_width}x{mxu_width} "
                              f"weight tile: {capacity:,} MACs for {m * k * n:,} useful)"),
                        note=f"compiled for {chip.name}")
