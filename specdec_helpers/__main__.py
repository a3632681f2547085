"""``python -m specdec_helpers <command>``: see `cli`."""

import sys

from specdec_helpers.cli import main

if __name__ == "__main__":
    sys.exit(main())
