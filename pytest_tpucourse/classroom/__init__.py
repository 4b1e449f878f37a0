"""Grading a class: `tpucourse grade`, one pytest process per tree, a gradebook, shards.

record.py is the only part that runs inside a graded pytest process (the end-of-run
record the plugin writes); everything else runs in the grading parent, which reads
each child's record from that child's private folder.
"""
