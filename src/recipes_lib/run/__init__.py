"""One recipe run: the values it decides, the context manager its Trainer is built in, its entry point.

    with RecipeRun(args, SPEC) as run:      output_dir checked, --resume_from_checkpoint resolved, seed set
        prepared = prepare(args, SPEC)       family, attention, precision, task, batch decided once; data tokenized
        run.start_tracking(prepared)         the W&B run starts; memory phases begin
        model = load_model(prepared.model_args, prepared.model_config)
        trainer = RecipeTrainer(..., args=prepared.training_args, compute_metrics=prepared.metrics,
                                compute_loss_func=prepared.loss, callbacks=run.callbacks(model))
        run.clear_previous_run()             --overwrite_output_dir: the old run goes, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()
        metrics = run.final_metrics(trainer)        the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics, prepared)   predictions, results.json, W&B, the card

`args` is never changed; `prepared` is frozen. Any `transformers.Trainer` works in place of
RecipeTrainer (recipes/README.md says what goes). `run_main(main)` turns a user error into one
paragraph on stderr and an exit code.
"""

from recipes_lib.run.preparation import Prepared, prepare
from recipes_lib.run.recipe_run import RecipeRun, run_main

__all__ = ["Prepared", "RecipeRun", "prepare", "run_main"]
