"""Facts the chapters state about the toolchain, read off the installed JAX, XLA and libtpu.

One module per chapter (test_chNN.py); docs/facts.md lists each claim beside its test, and
test_facts_list.py keeps the two in step. reading.py holds the readers the modules share.
"""
