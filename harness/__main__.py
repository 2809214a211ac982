import os
import sys

# `python -m harness` puts the working directory first on `sys.path`: run from a case folder, a module there (a
# `secrets.py`) would shadow the standard library's for everything imported from here on. Kept only where it is
# the harness's own root (a checkout run without installing it).
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    if os.getcwd() != os.path.dirname(os.path.dirname(os.path.abspath(__file__))):
        del sys.path[0]

from harness.frontends.cli import main  # noqa: E402 - after the path is made safe

# Guarded: multiprocessing's spawn re-imports the main module in each worker.
if __name__ == "__main__":
    sys.exit(main())
