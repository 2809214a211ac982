"""pytest entry: cases under cases/ (and --case-path) run as tests through the harness plugin."""

pytest_plugins = ["harness.pytest_plugin"]
