"""The `tpucourse` command: its entry point and one module per group of subcommands."""
