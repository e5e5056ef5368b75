"""Distillation: a student trains in full on a teacher's logits and the gold labels.

    accelerate launch --config_file accelerate_configs/single_gpu.yaml recipes/distill.py \
        --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 --teacher outputs/full_ft \
        --train_file train.csv --validation_file validation.csv --transfer_file unlabelled.csv

--teacher is the output_dir of any recipe's run (a full model, a LoRA or QLoRA adapter). Its logits
on every training row are computed once, before the student loads, and cached in
output_dir/teacher_logits/. Per row: alpha x T^2 x KL to the teacher's softened probabilities (BCE
to its sigmoid outputs for multi-label, MSE to its output for regression) + (1 - alpha) x the task's
loss on the gold label; a row without one (an empty label cell, --transfer_file) learns from the
teacher alone. T=2, alpha=0.5 (--distill_temperature, --distill_alpha). Memory: the student's full
fine-tuning; the teacher's inference runs before it. The lines marked NEW are what distillation adds.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, run_main
from recipes_lib.training.distillation import UnlabelledRows, add_teacher_targets, check_teacher  # NEW
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["distill"]  # NEW: --teacher, --distill_temperature, --distill_alpha, --transfer_file


def main(argv=None):
    # Arguments: model, data and training dataclasses; the --config YAML first, the command line wins
    args = parse_arguments(SPEC, argv)
    distill = args.options(SPEC.options)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        # Data: a DatasetDict (train, validation, test if given), labels as ids, tokenized and cached
        check_teacher(distill.teacher)  # NEW: a saved model, checked before any data or weights load
        unlabelled = UnlabelledRows.set_aside(args.data, distill)  # NEW: empty label cells, --transfer_file
        data = run.load_data(train_file=unlabelled.labelled_file)  # NEW: the labelled rows (None: all)
        # NEW: the teacher's logits (computed once, cached, the teacher freed) packed into the training
        # NEW: rows' labels, unlabelled rows added; the loss mixes the teacher's term and the gold label's
        data, distill_loss = add_teacher_targets(run, distill, unlabelled)  # NEW
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
            compute_loss_func=distill_loss,  # NEW: alpha x teacher term + (1 - alpha) x the task's loss
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()  # the model and tokenizer in output_dir
        metrics = run.final_metrics(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics)  # predictions, results.json, the W&B summary


if __name__ == "__main__":
    run_main(main)
