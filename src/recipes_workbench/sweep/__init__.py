"""`recipes-lib sweep`: a fair comparison of recipes, each at its own learning rate, over seeds.

docs/development.md lists its modules, docs/sweeps.md the command. Optuna is the optional extra `sweep`
(pip install 'recipes-lib[sweep]'): study.py and runner.py import it; config.py and preflight.py do not.
"""
