"""Checks beyond values: the TPU's rules on a CPU (lowering, races, bounds), the compiler's own figures, answers about IR."""
