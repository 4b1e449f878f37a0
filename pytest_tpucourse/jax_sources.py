"""JAX internals behind source locations in IR; written against jax 0.10.2.

Every use of JAX's private modules for reading locations lives here, so a JAX upgrade
touches one file (tests/test_ir_xray.py exercises each piece):

- equation_location: the innermost user frame of a jaxpr equation, through
  `jax._src.source_info_util.user_frame` (jax.extend only exposes a summary string,
  which lacks the end of the range).
- current_locations: the persistent compilation cache keys a program on its text with
  the debug information stripped (`jax._src.cache_key`), so by default a compile of
  moved or copied code returns the executable cached for the old code, metadata and
  all: stale lines, even another file's name. The public flag
  `jax_compilation_cache_include_metadata_in_key` puts locations into the key. (Setting
  `jax_enable_compilation_cache` to False mid-process does not help: once the cache
  has been used it only changes the key, and entries under that key go stale too.)
- persistent_cache: a persistent cache in a directory of one's choosing for a block,
  through `jax._src.compilation_cache.reset_cache`, so tests can provoke the trap.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from .hlo_text import SourceLocation

JAX_VERSION = "0.10.2"


def equation_location(eqn) -> SourceLocation | None:
    """Where the user's code created this jaxpr equation: its innermost non-JAX frame."""
    from jax._src import source_info_util

    frame = source_info_util.user_frame(eqn.source_info.traceback)
    if frame is None:
        return None
    return SourceLocation(frame.file_name, frame.start_line, frame.start_column, frame.end_line,
                          frame.end_column)


@contextlib.contextmanager
def current_locations():
    """Compiles inside this block carry the source's current locations, cache or no cache."""
    import jax

    previous = jax.config.jax_compilation_cache_include_metadata_in_key
    jax.config.update("jax_compilation_cache_include_metadata_in_key", True)
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_include_metadata_in_key", previous)


_CACHE_SETTINGS = ("jax_compilation_cache_dir", "jax_enable_compilation_cache",
                   "jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes")


@contextlib.contextmanager
def persistent_cache(directory: Path):
    """A persistent compilation cache in `directory` for this block; the previous one after.

    JAX initialises its cache once per process, from the settings of the first compile;
    reset_cache makes it read them again on entry and again on exit.
    """
    import jax
    from jax._src import compilation_cache

    saved = {name: getattr(jax.config, name) for name in _CACHE_SETTINGS}
    compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:
        yield Path(directory)
    finally:
        compilation_cache.reset_cache()
        for name, value in saved.items():
            jax.config.update(name, value)
