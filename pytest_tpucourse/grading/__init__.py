"""How graded code is reached and run: the graded tree, guarded calls, compiled programs,
short messages, the backend, the deadline and the VMEM budget. Graded tests never import
this package; they reach it through the `impl` fixture and the checker."""
