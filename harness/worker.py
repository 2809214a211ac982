"""`python -m harness.worker`: the worker, kept at its old path for command lines that name it
(`harness.isolation.worker` is the module)."""

from harness.isolation.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
