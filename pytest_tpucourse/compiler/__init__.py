"""The real TPU compiler on a machine without a TPU: libtpu, ahead of time."""
