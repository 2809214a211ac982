"""One case run, in the order it happens: `config` (what to run), `sides` (eager twice, then compiled),
`verdict` (settled from both, with `diagnoses` and, under `--bisect`, `localize`), `errors` (how a run fails),
and `case` (`run_case`, which turns a case into a record); `expectations` applies expected failures to it after.
"""
