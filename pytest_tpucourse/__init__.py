"""pytest-tpucourse: grade TPU Pallas kernels on any machine, measure them on a TPU.

The toolkit, what graded tests and learners import, is the package's top level (listed in
`__all__`, each module with its own `__all__`): `checks` (values, grads, refusals), `strategies`
(inputs), `references` (float64 oracles and XLA floors), `roofline` and `chips` (floors and
figures), `public_kernels` (JAX's shipped kernels, the ceiling), `prompt` (a reproduction at a
Python prompt), `ir` (what a program contains), `tpu` (the TPU's compiler and rules on a CPU),
`gating` (the gates' criteria), and the chapters' instruments under `instruments/`.
Everything else (core/, readers/, compiler/, checking/, grading/, gates/, learner/, run/,
commands/) is machinery behind the plugin's fixtures, free to change.
"""

__version__ = "0.1.0"

__all__ = ["checks", "chips", "gating", "instruments", "ir", "prompt", "public_kernels", "references",
           "roofline", "strategies", "tpu"]
