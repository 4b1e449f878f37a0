"""Repository-level pytest settings only; every hook lives in the pytest_tpucourse plugin.

solutions/ holds implementations, not tests: it is graded through exercises/
with --solutions, never collected on its own.
"""

collect_ignore = ["solutions", "bench"]
