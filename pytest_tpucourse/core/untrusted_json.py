"""JSON that another process (a graded tree's, a learner's hand) wrote: read within bounds.

`json.loads` makes one C call per `[` or `{` it opens, so 200,000 nested lists raise
RecursionError, which a reader that expects ValueError for a bad file does not catch; and a
value read whole may still be nested too deep for what walks it next (`str()`, a comparison).
`loads` reads at most `size` bytes nested at most `depth` deep, and says what is wrong with
anything else in one JsonError (a ValueError): not UTF-8, not JSON, too large, too deep.
"""

from __future__ import annotations

import json


class JsonError(ValueError):
    """Bytes that are not JSON within the reader's bounds; the message says why."""


def loads(data: bytes | str, *, depth: int, size: int | None = None):
    """The value `data` holds: JSON nested at most `depth` deep (a list of lists is 2), at most
    `size` bytes (None: any)."""
    if size is not None and len(data) > size:
        raise JsonError(f"{len(data):,} bytes: more than the {size:,} read")
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonError(f"nested deeper than the {depth} levels read") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError alike
        raise JsonError(f"not JSON: {error}") from None
    if nesting(value, depth) > depth:
        raise JsonError(f"nested deeper than the {depth} levels read")
    return value


def nesting(value, limit: int | None = None) -> int:
    """How deep lists and dicts are nested in `value` (a number or string is 0), counted without
    recursion; it stops counting once past `limit`."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if limit is not None and deepest > limit:
            return deepest
        pending.extend((child, level + 1) for child in children)
    return deepest
