"""`recipes-lib crossval` and `recipes-lib label-issues`: K-fold cross-validation on the sweep's engine,
out-of-fold predictions, and the rows most likely mislabelled (docs/development.md lists the modules,
docs/crossval.md the commands).

crossval builds on the sweep (it needs Optuna, the 'sweep' extra); label-issues needs cleanlab, the
'data-quality' extra.
"""
