"""What users call: the CLI, the pytest plugin, the option table they share, and publishing results."""
