"""Program readers: what a traced, lowered or compiled program contains (kernels, BlockSpecs, fetches, VMEM, Mosaic, HLO text), and the reproduction of a check on one."""
