"""Extraction: from a named kernel to verified, standalone repros (`harness extract`, `run --extract DIR`).

- `capture`: the kernel's launch and its graph's eager values, kept during one more probe run;
- `subgraph`: the post-grad nodes the kernel implements cut out as a function (torch.fx), and widened;
- `forms`: the kernel-level `repro.py`, the graph-level case module, the plain script, as text;
- `kernel_repro`: what `repro.py` runs (the generated kernel on its saved launch);
- `extract`: writing each form, verifying it, and keeping only those that reproduce.
"""
