"""How many MXU pushes (`vmatmul` instructions) one grid step of a bf16 matmul block issues.

The MXU holds a tile of the right operand (the weights) and has rows of the
left operand pushed through it, one vreg at a time: 16 bf16 rows (8 sublanes,
2 rows packed per sublane) by up to one weight tile's depth. A (bm, bk) x (bk, bn)
block product therefore takes ceil(bm / 16) pushes per weight tile (a last group of
fewer rows still takes a whole push), and ceil(bk / T) * ceil(bn / T) weight tiles of
T x T, T being the MXU's width: 128 on v4, v5e and v5p (four MXUs), 256 on v6e and
v7x (two). On a 256-wide MXU a block whose bk and bn are both at most 128 fills a
quarter of it, and the compiler runs two row groups per push, in pairs: half the
pushes when the row groups are even in number, all of them when they are odd (one
group of 16 rows, or three of 48: libtpu 0.0.42.1).
"""

MXU_WIDTH = {"v4": 128, "v5e": 128, "v5p": 128, "v6e": 256, "v7x": 256}
ROWS_PER_PUSH = 16


def vmatmuls_per_step(bm: int, bk: int, bn: int, chip: str) -> int:
    """vmatmul instructions per grid step for a (bm, bk) @ (bk, bn) bf16 block."""
    width = MXU_WIDTH[chip]
    row_groups = -(-bm // ROWS_PER_PUSH)
    if width == 256 and bk <= 128 and bn <= 128 and row_groups % 2 == 0:
        row_groups //= 2
    return row_groups * -(-bk // width) * -(-bn // width)
