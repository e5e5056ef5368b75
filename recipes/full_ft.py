"""Full fine-tuning: every weight of the encoder and the new classification head trains with AdamW.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/full_ft.py --config recipes/configs/full_ft.yaml

With no arguments: bert-base-uncased on GLUE SST-2, batch 32, lr 2e-5, 3 epochs (`--help` lists
every option). Memory per parameter: 4 B weights + 4 B gradients + 8 B AdamW state = 16 B.
The other recipes are this script plus the lines marked NEW.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, run_main
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["full_ft"]


def main(argv=None):
    # Arguments: model, data and training dataclasses; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        # Data: a DatasetDict (train, validation, test if given), labels as ids, tokenized and cached
        data = run.load_data()
        run.start_tracking()  # the W&B run starts here (offline without an API key); memory phases begin
        # Model: AutoModelForSequenceClassification, a new head for these labels
        model = load_model(run.model_args, run.model_config)  # args.model with the family's attention kernel
        training_args = run.resolve(args.training)  # a copy: the family's precision, auto batch size
        trainer = RecipeTrainer(  # transformers.Trainer plus safeguards (signals, NaN, complete checkpoints)
            model=model,
            args=training_args,  # what the Trainer gets; args.training stays as parsed
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=run.tokenizer,
            data_collator=padding_collator(run.tokenizer, args.data, training_args.device),
            compute_metrics=run.compute_metrics,  # the task's metrics, from evaluate modules
            compute_loss_func=run.compute_loss,  # --class_weights: weighted cross-entropy; else the model's
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()  # the model and tokenizer in output_dir
        metrics = run.final_metrics(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics)  # predictions, results.json, the W&B summary


if __name__ == "__main__":
    run_main(main)
