"""Full fine-tuning with bitsandbytes' 8-bit AdamW: every weight trains, the optimizer state shrinks 4x.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/adamw_8bit.py --config recipes/configs/adamw_8bit.yaml

Same defaults as full_ft.py. AdamW's moments are stored block-wise in uint8: 2 x 1 B + 2 x 4 B of
absmax per 256 elements = 2.03 B per parameter instead of 8 B, for tensors of 4,096 elements or
more. nn.Embedding weights keep 32-bit state by default (bitsandbytes' advice). The lines marked
NEW are what this recipe changes in full_ft.py.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adamw_8bit import create_adamw_8bit  # NEW
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, run_main
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["adamw_8bit"]  # NEW: its options (--embedding_optimizer_bits, --paged_optimizer)


def main(argv=None):
    # Arguments: model, data and training dataclasses; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    options = args.options(SPEC.options)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        # Data: a DatasetDict (train, validation, test if given), labels as ids, tokenized and cached
        data = run.load_data()
        run.start_tracking()  # the W&B run starts here (offline without an API key); memory phases begin
        # Model: AutoModelForSequenceClassification, a new head for these labels
        model = load_model(run.model_args, run.model_config)  # args.model with the family's attention kernel
        training_args = run.resolve(args.training)  # a copy: the family's precision, auto batch size
        optimizer = create_adamw_8bit(  # NEW: bitsandbytes AdamW8bit, the Trainer's weight-decay groups
            model, training_args, options.embedding_optimizer_bits, paged=options.paged_optimizer
        )
        trainer = RecipeTrainer(  # transformers.Trainer plus safeguards (signals, NaN, complete checkpoints)
            model=model,
            args=training_args,  # what the Trainer gets; args.training stays as parsed
            train_dataset=data["train"],
            eval_dataset=data["validation"],
            processing_class=run.tokenizer,
            data_collator=padding_collator(run.tokenizer, args.data, training_args.device),
            optimizers=(optimizer, None),  # NEW: the Trainer builds the learning-rate schedule
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
