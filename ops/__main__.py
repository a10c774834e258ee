"""``python -m ops``: the single entry point (see ops/cli.py)."""

import sys

from ops.cli import main

if __name__ == "__main__":
    sys.exit(main())
