"""``python -m pytest_graphleak``: the ``graphleak`` command."""

import sys

from pytest_graphleak.cli import main

if __name__ == "__main__":
    sys.exit(main())
