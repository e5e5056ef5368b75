"""One recipe run: the context manager a recipe script builds its Trainer in, and its entry point.

    with RecipeRun(args, SPEC) as run:      output_dir checked, --resume_from_checkpoint resolved, seed set
        data = run.load_data()               tokenizer and config.json checks, then the tokenized DatasetDict
        run.start_tracking()                 the W&B run starts; memory phases begin
        model = load_model(run.model_args, run.model_config)
        training_args = run.resolve(args.training)   a copy: the family's precision, --auto_batch_size's batch
        trainer = RecipeTrainer(..., args=training_args, compute_metrics=run.compute_metrics,
                                compute_loss_func=run.compute_loss, callbacks=run.callbacks(model))
        run.clear_previous_run()             --overwrite_output_dir: the old run goes, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()
        metrics = run.final_metrics(trainer)        the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics)   predictions, results.json, W&B, the card

`args` is never changed; `run.model_args` and `training_args` are copies with what the run resolved.
Any `transformers.Trainer` works in place of RecipeTrainer (recipes/README.md says what goes).
`run_main(main)` turns a user error into one paragraph on stderr and an exit code.
"""

from recipes_lib.run.entry import run_main
from recipes_lib.run.recipe_run import RecipeRun

__all__ = ["RecipeRun", "run_main"]
