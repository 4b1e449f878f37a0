"""Grading a class: `tpucourse grade`, one sandbox per tree, a gradebook, shards.

record.py is the only part that runs inside a graded pytest process (the end-of-run
record the plugin writes); everything else runs in the grader, which starts each tree's
processes in the tree's sandbox (sandbox.py) and reads back what they handed over only
once every one of them has ended.
"""
