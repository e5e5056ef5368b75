"""`python -m recipes_lib.cli compare ...`: the `recipes-lib` command without the installed script."""

import sys

from recipes_lib.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
