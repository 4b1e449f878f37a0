"""The `tpucourse` command: its entry point (main.py) and one module per subcommand."""
