"""One pytest run of the course: the session built from the config, the plugin's hook specifications, mutant trees."""
