"""One case run: its configuration, the program run in each mode, dynamic sizes, known issues, and `run_case`, which
turns a case into a record.
"""
