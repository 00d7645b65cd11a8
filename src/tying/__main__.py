"""`python -m tying` is the same as the `tying` console script."""

import sys

from tying.cli import main

if __name__ == "__main__":
    sys.exit(main())
