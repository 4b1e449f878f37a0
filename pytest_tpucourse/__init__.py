"""pytest-tpucourse: grade TPU Pallas kernels on any machine, measure them on a TPU.

Public API for graded tests: the `impl` fixture (registered by the plugin),
`checks`, `strategies`, and the outcome types in `outcomes`.
"""

__version__ = "0.1.0"
