"""`python -m recipes_workbench.cli compare ...`: the `recipes-lib` command without the installed script."""

import sys

from recipes_workbench.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
