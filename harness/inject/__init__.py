"""Emulations and injected faults: launch-level handlers, rewritten kernels, the selectors that choose launches, and
triton-ascend's bug classes (`ascend`).
"""
