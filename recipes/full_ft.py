"""Full fine-tuning: every weight of the encoder and the new classification head trains with AdamW.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py --config recipes/configs/full_ft.yaml

With no arguments: bert-base-uncased on GLUE SST-2, batch 32, lr 2e-5, 3 epochs (`--help` lists
every option). Memory per parameter: 4 B weights + 4 B gradients + 8 B AdamW state = 16 B.
The other recipes are this script plus the lines marked NEW.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.trainer import RecipeTrainer

# Parses ModelArguments, DataArguments, `options` and RecipeTrainingArguments; YAML and command line override:
SPEC = RecipeSpec(
    name="full_ft",
    summary="every weight trains, torch AdamW",
    training_defaults={
        "learning_rate": 2e-5,  # AdamW's peak, warmed up over the first 6% of steps
    },
)


def main(argv=None):
    args = parse_arguments(SPEC, argv)  # typed, validated; never edited afterwards
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        prepared = prepare(args)  # every decision made once; the data tokenized
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        run.start_tracking(prepared)  # the W&B run (offline without an API key); memory phases begin
        model = load_model(prepared.model_args, model_config)
        trainer = RecipeTrainer(  # transformers.Trainer plus safeguards (signals, NaN, complete checkpoints)
            model=model,
            args=training_args,
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=tokenizer,
            data_collator=padding_collator(tokenizer, args.data, training_args.device),
            compute_metrics=prepared.metrics,
            compute_loss_func=prepared.loss,  # --class_weights: weighted cross-entropy; None: the model's
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()
        evaluation = run.final_evaluation(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, evaluation, prepared)


if __name__ == "__main__":
    run_main(main)
