"""The learner's loop outside a test run: progress, the state file, `tpucourse` commands, watch."""
