"""Predict what the TPU toolchain says about a small kernel, before asking it.

Two stages judge a Pallas kernel. Pallas' TPU lowering (on any machine) checks
the BlockSpecs against the (8, 128) rule and refuses primitives it has no Mosaic
rule for. The Mosaic and LLO compiler (libtpu) then checks what only it knows:
the tiling XLA gave each array in HBM, which vector ops and shape casts the
chip's vector unit supports, and whether the double-buffered blocks fit the
scoped VMEM. Each rule below was measured with libtpu 0.0.42.1 (jax 0.10.2) and
0.0.50.1 (jax 0.12): libtpu 0.0.50 dropped two of 0.0.42's refusals (RETILES_BLOCKS).
"""

import numpy as np

# The compiler's default scoped-VMEM limit, from its E1001 errors.
SCOPED_VMEM = {"v5e": 16 * 2**20, "v5p": 16 * 2**20, "v6e": 32 * 2**20, "v7x": 32 * 2**20}
UNSUPPORTED = {"cumsum"}  # primitives the TPU lowering has no rule for
# From libtpu 0.0.50 on, Mosaic re-tiles a block that is not made of whole HBM tiles, and it
# supports shape casts that move elements across lanes: no "tiling" or such "mosaic" verdicts.
RETILES_BLOCKS = (0, 0, 50)


def predict_verdict(body: str, shape: tuple, dtype: str, block: tuple, chip: str = "v5e",
                    libtpu: tuple = (0, 0, 50)) -> str:
    """"ok", "block shape", "unsupported op", "tiling", "mosaic" or "vmem" (see the stub)."""
    bits = np.dtype(dtype).itemsize * 8
    rows, lanes = block[-2:]
    array_rows, array_lanes = shape[-2:]
    if not ((rows % 8 == 0 or rows == array_rows) and (lanes % 128 == 0 or lanes == array_lanes)):
        return "block shape"
    if body in UNSUPPORTED:
        return "unsupported op"
    if body == "matmul" and bits < 32:
        return "unsupported op"  # this Mosaic's tpu.matmul verifier wants a 32-bit accumulator; jnp.dot asked for bf16
    # XLA tiles an 8-bit array whose rows divide by 32 in (32, 128) tiles; before libtpu 0.0.50
    # a block had to follow them.
    if libtpu < RETILES_BLOCKS and bits == 8 and array_rows % 32 == 0 and rows % 32 and rows != array_rows:
        return "tiling"
    if body == "double" and bits == 8:
        return "mosaic"  # no 8-bit vector arithmetic
    if body == "matmul" and np.issubdtype(np.dtype(dtype), np.integer):
        return "mosaic"  # an int32 dot lowers (its accumulator is 32-bit), but Mosaic's matmul takes no integers
    if libtpu < RETILES_BLOCKS and body == "split_lanes" and lanes // 2 < 128:
        return "mosaic"  # a shape cast that moves elements across lanes: not before libtpu 0.0.50
    out_block = (2 * rows, lanes // 2) if body == "split_lanes" else (rows, lanes)
    block_bytes = (rows * lanes + out_block[0] * out_block[1]) * bits // 8
    if 2 * block_bytes > SCOPED_VMEM[chip]:  # input and output windows, two buffers each
        return "vmem"
    return "ok"
