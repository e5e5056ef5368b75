"""LoRA: the encoder is frozen; low-rank adapters on the attention projections and the head train.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/lora.py
    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/lora.py --config recipes/configs/lora.yaml

Same defaults as full_ft.py except the learning rate, 1e-3 instead of 2e-5. r=8, alpha=16,
dropout 0.1 on `query` and `value`; `--lora_target_modules all-linear` adapts every linear layer.
output_dir holds the adapter with the head; `--merge_adapter` also writes a plain model to
output_dir/merged. The lines marked NEW are what LoRA changes in full_ft.py.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adapters import add_lora, save_adapter_extras  # NEW
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, run_main
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["lora"]  # NEW: its options (--lora_r, --lora_target_modules, ...), learning rate 1e-3


def main(argv=None):
    # Arguments: model, data and training dataclasses; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    lora = args.options(SPEC.options)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        # Data: a DatasetDict (train, validation, test if given), labels as ids, tokenized and cached
        data = run.load_data()
        run.start_tracking()  # the W&B run starts here (offline without an API key); memory phases begin
        # Model: AutoModelForSequenceClassification, a new head for these labels
        model = load_model(run.model_args, run.model_config)  # args.model with the family's attention kernel
        model = add_lora(model, lora)  # NEW: a PeftModel; the encoder frozen, adapters and the head train
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
        merged = None  # NEW: --merge_adapter's model, scored in memory by write_results
        if run.is_main_process:  # NEW: config.json (label names) beside the adapter; --merge_adapter's model
            merged = save_adapter_extras(run.arguments, run.model_config, run.tokenizer, lora)
        metrics = run.final_metrics(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics, merged)  # NEW: merged, scored


if __name__ == "__main__":
    run_main(main)
