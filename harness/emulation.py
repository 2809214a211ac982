"""Injections at the path packages that add their own (`harness.injections` entry points) import them from:
`Injection`, `make_handler`, the catalogue, re-exported from `harness.inject.launch`, where they live."""

from harness.inject.launch import *  # noqa: F401,F403
from harness.inject.launch import Injection, injection_named, injection_names, make_handler, parse_injection  # noqa: F401
