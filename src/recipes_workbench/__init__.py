"""The workbench: tools over finished runs, beside the run library (recipes_lib): planner/, sweep/,
crossval/, export/, tools/, dashboard.py, shared.py, recipes.py (the list of recipes) and cli/ (the
`recipes-lib` command). It imports the run library only through recipes_lib.PUBLIC_API (import-linter,
setup.cfg); the run library never imports it. Importing it does nothing.
"""
