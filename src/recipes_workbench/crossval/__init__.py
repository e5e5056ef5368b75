"""`recipes-lib crossval` and `recipes-lib label-issues`: K-fold cross-validation on the sweep's engine,
out-of-fold predictions, and the rows most likely mislabelled.

    folds.py          the training file read as the recipe reads it; the checks; the stratified (grouped)
                      folds; each fold's train and held-out files
    runner.py         the folds as the sweep's trials (one `accelerate launch` each, the study in
                      OUTPUT_DIR/crossval.db, resumable), then the results
    oof.py            out-of-fold predictions (oof_predictions.jsonl) and the mean ± std over folds
    ensemble.py       with --test_file: the test split per fold (mean ± std) and by the folds' averaged
                      probabilities
    label_issues.py   cleanlab over held-out probabilities (a crossval's out-of-fold ones, or a single
                      run's of its validation split): label_issues.csv, label_issues.json
                      (with a caution when the model is no better than the majority class),
                      a cleaned file

crossval builds on the sweep (it needs Optuna, the 'sweep' extra); label-issues needs cleanlab, the
'data-quality' extra.
"""
