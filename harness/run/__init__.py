"""One case run, in the order it happens: `config` (its record), `sides` (eager twice, then compiled), `verdict`
(what both sides found, with `diagnoses` and, under `--bisect`, `localize_run`), `errors` (how a run fails), and
`case` (`gather`, which turns a case into an undecided record and its facts; `run_case`, which also decides it).
The verdict is `harness.judge.decision`'s.
"""
