"""The pytest plugin, under the name its entry point, the checkout's conftest.py and `-p harness.pytest_plugin`
register it by (`harness.frontends.pytest_frontend` is the module): its hooks, re-exported."""

from harness.frontends.pytest_frontend import *  # noqa: F401,F403
