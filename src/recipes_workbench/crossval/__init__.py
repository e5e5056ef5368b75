"""`recipes-lib crossval` (on the sweep's engine: the 'sweep' extra) and `recipes-lib label-issues` (the
'data-quality' extra): docs/crossval.md; docs/development.md lists the modules.
"""
