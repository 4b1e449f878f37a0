"""The objects a run's start made are set aside from Python's cyclic garbage collector.

By the time a course run's session starts, pytest, hypothesis, NumPy, JAX and the plugin are
imported: about 140,000 objects (modules, classes, functions, JAX's tables) that live as long
as the process and are never garbage. Every full collection walks them all again, about 50 ms
each: the automatic ones while the tests run, and the two pytest's unraisableexception plugin
asks for at its end. `gc.freeze()` moves them to the permanent generation once, so those
collections walk only what was made after, the tests' and the learner's objects, which are
collected as before (https://docs.python.org/3/library/gc.html#gc.freeze). As CPython documents,
the frozen objects are no longer listed by `gc.get_objects()` nor found by `gc.get_referrers()`
until `gc.unfreeze()`: code that searches the heap for the plugin's objects must thaw it first.
"""

from __future__ import annotations

import gc

_done = False


def set_aside() -> None:
    """Freeze the objects that exist now; once per process (a pytest run inside another, as
    pytester's in-process runs are, finds it done)."""
    global _done
    if not _done:
        gc.freeze()
        _done = True
