"""The base every other layer stands on: the one shim over JAX's private APIs, the course as data, how a graded test ends, folders kept across runs, and the tolerance rule."""
