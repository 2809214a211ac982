import sys

from harness.frontends.cli import main

# Guarded: multiprocessing's spawn re-imports the main module in each worker.
if __name__ == "__main__":
    sys.exit(main())
