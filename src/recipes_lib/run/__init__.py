"""One recipe run: `prepare` decides every value once (preparation.py), `RecipeRun` is the context
manager the script builds its Trainer in, `run_main` its entry point (recipe_run.py); recipes/full_ft.py
shows the order. `args` is never changed; `prepared` is frozen.
"""

from recipes_lib.run.preparation import Prepared, prepare
from recipes_lib.run.recipe_run import RecipeRun, run_main

__all__ = ["Prepared", "RecipeRun", "prepare", "run_main"]
