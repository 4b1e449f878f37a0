"""Graded tests for ch06.legality: check_block(array_shape, block_shape, dtype) -> reason | None.

The judge is the real thing: Pallas' TPU (Mosaic) lowering, run on this CPU for a kernel
that copies one block of one array (pytest_tpucourse.readers.blockspecs.lowering_error, about
10 ms a block). check_block must return None exactly where the lowering accepts the
block, and a non-empty reason exactly where it refuses it. Where a dtype's native tile
and the lowering's rule part ways, the real compiler (the tpu-compile extra) is asked
too, so that a rule that took the tile for the rule hears what the tile does decide.
"""

from hypothesis import example, given
from hypothesis import strategies as st

from pytest_tpucourse import checks, ir, tpu

DTYPES = ("float32", "bfloat16", "float16", "int32", "int8")
ARRAY_DIMS = (1, 7, 8, 16, 24, 100, 128, 130, 256, 384, 1000, 1024, 4096)
BLOCK_DIMS = (None, 1, 4, 8, 12, 16, 64, 100, 128, 200, 256, 384, 512, 1024, 3072)

# One witness per mistake a hand-written rule makes.
CORNERS = (
    ((1024, 1024), (8, 128), "float32"),  # the minimal f32 tile
    ((1024, 1024), (8, 128), "bfloat16"),  # lowers: (16, 128) is bf16's native tile, not the rule
    ((1024, 1024), (8, 128), "int8"),
    ((1024, 1024), (4, 128), "float32"),  # 4 rows
    ((1024, 1024), (8, 64), "float32"),  # 64 lanes
    ((1024, 1024), (128, 8), "float32"),  # 8 and 128 on the wrong axes
    ((1, 512), (1, 128), "float32"),  # 1 row: the array's whole dimension
    ((100, 384), (100, 384), "float32"),  # the whole array
    ((100, 384), (200, 128), "float32"),  # larger than the array, still a multiple of 8
    ((16, 128), (None, 128), "float32"),  # a squeezed dimension is 1 row, not 16
    ((1, 128), (None, 128), "float32"),  # ... which is the whole dimension here
    ((4, 16, 128), (None, 16, 128), "float32"),  # leading dimensions are free
    ((3, 5, 7), (2, 5, 7), "float32"),
    ((6, 8, 256), (4, 8, 256), "bfloat16"),
    ((4096,), (128,), "float32"),  # rank 1: a power of two >= 128
    ((4096,), (128,), "bfloat16"),  # ... >= 256 for a 16-bit type
    ((4096,), (384,), "float32"),  # a multiple of 128 is not enough in rank 1
    ((4096,), (3072,), "float32"),  # a multiple of 1024 is
    ((4096,), (256,), "int8"),  # an 8-bit type needs >= 512
    ((1000,), (1000,), "int8"),  # the whole array
    ((), (), "float32"),  # rank 0, a scalar's block: refused, there is no dimension to tile
)


# Blocks the lowering accepts in every dtype, filling part of a native tile or a whole one.
# Compiled for a v5e: the bf16 ones compile; int8 (8, 128) and (16, 128) are refused by libtpu
# 0.0.42.1 (E2002: int8 arrays are laid out in (32, 128) tiles) and compiled by 0.0.50.1, which
# re-tiles them (chapter 7); int8 (32, 128) compiles on both.
DTYPE_TILES = (
    ((1024, 1024), (8, 128), "bfloat16"),
    ((1024, 1024), (16, 128), "bfloat16"),
    ((1024, 1024), (8, 128), "int8"),
    ((1024, 1024), (16, 128), "int8"),
    ((1024, 1024), (32, 128), "int8"),
)


@st.composite
def block_triples(draw):
    """(array shape, block shape, dtype), the block often the array's own dimension."""
    rank = draw(st.sampled_from((1, 2, 2, 3)))
    shape = tuple(draw(st.sampled_from(ARRAY_DIMS)) for _ in range(rank))
    block = tuple(draw(st.sampled_from((dim, dim) + BLOCK_DIMS)) for dim in shape)
    if rank == 1 and block[0] is None:
        block = (shape[0],)  # a rank-1 block has nothing to squeeze
    return shape, block, draw(st.sampled_from(DTYPES))


def test_check_block_agrees_on_the_corner_cases(impl):
    ir.assert_rule_matches_lowering(impl.legality.check_block, CORNERS)


def test_check_block_on_the_tiles_the_compiler_enforces(impl):
    """A native tile is a layout the compiler enforces per dtype, not the lowering's rule."""
    impl.legality.check_block(*DTYPE_TILES[0])  # a stub is reported as TODO, with or without the extra
    tpu.skip_unless_available()
    ir.assert_rule_matches_lowering(impl.legality.check_block, DTYPE_TILES, compiler="v5e",
                                            note="the triples: DTYPE_TILES of exercises/ch06/test_legality.py")


@given(batch=st.lists(block_triples(), min_size=25, max_size=25))
@example(batch=[((8, 128), (8, 128), "float32")] * 25)
def test_check_block_agrees_with_the_tpu_lowering(impl, batch):
    ir.assert_rule_matches_lowering(impl.legality.check_block, batch)


def _verdicts(graded, batch):
    """check_block's answer for each triple of the batch."""
    return [graded(tuple(shape), tuple(block), dtype) for shape, block, dtype in batch]


def _legal_where_the_lowering_is(got, expected):
    """None when each answer is None exactly where the lowering took the block, a reason elsewhere."""
    batch, lowers = expected
    if not (isinstance(got, (list, tuple)) and len(got) == len(batch)):
        return f"answered {got!r:.100} for {len(batch)} blocks"
    for (shape, block, dtype), said, legal in zip(batch, got, lowers):
        call = f"check_block({tuple(shape)}, {tuple(block)}, {dtype!r})"
        if said is not None and not (isinstance(said, str) and said.strip()):
            return f"{call} returned {said!r}; expected None (legal) or a non-empty reason"
        if legal and said is not None:
            return f"{call} says the block is illegal ({said!r:.120}), but the TPU lowering accepts it"
        if not legal and said is None:
            return f"{call} returned None (legal), but the TPU lowering rejects it"
    return None


def _draw_triple(rng):
    rank = int(rng.choice((1, 2, 2, 3)))
    shape = tuple(int(rng.choice(ARRAY_DIMS)) for _ in range(rank))
    block = tuple((dim, dim, *BLOCK_DIMS)[int(rng.integers(len(BLOCK_DIMS) + 2))] for dim in shape)
    if rank == 1 and block[0] is None:
        block = (shape[0],)
    return shape, block, str(rng.choice(DTYPES))


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): blocks the grader draws, judged by the
    TPU lowering run in the grader's process."""
    batch = [_draw_triple(rng) for _ in range(25)] + [CORNERS[int(i)] for i in rng.choice(len(CORNERS), 5)]
    lowers = [ir.lowering_error(tuple(shape), tuple(block), dtype) is None for shape, block, dtype in batch]
    return [checks.trusted.exact("check_block", (batch,), through=_verdicts, expected=(batch, lowers),
                                 compare=_legal_where_the_lowering_is, label=f"check_block on {len(batch)} blocks")]


TRUSTED = checks.trusted.Cases(_trusted_cases)
