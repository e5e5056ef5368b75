"""Distillation: a student trains in full on a teacher's logits and the gold labels.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/distill.py \
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

from recipes_lib.config.distill_options import DistillArguments  # NEW
from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.recipe_spec import RecipeSpec
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.distillation import UnlabelledRows, add_teacher_targets, check_teacher  # NEW
from recipes_lib.training.trainer import RecipeTrainer

# Parses ModelArguments, DataArguments, `options` and RecipeTrainingArguments; YAML and command line override:
SPEC = RecipeSpec(
    name="distill",  # NEW
    summary="a student trains in full on a teacher run's logits (and the gold labels)",  # NEW
    options=DistillArguments,  # NEW: --teacher, --transfer_file, ...
    training_defaults={
        "learning_rate": 2e-5,  # AdamW's peak, warmed up over the first 6% of steps
        "distill_temperature": 2.0,  # NEW: T; the teacher term is multiplied by T^2
        "distill_alpha": 0.5,  # NEW: half teacher, half gold label
    },
)


def main(argv=None):
    args = parse_arguments(SPEC, argv)  # typed, validated; never edited afterwards
    distill = args.options(DistillArguments)  # NEW
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        check_teacher(distill.teacher)  # NEW: a saved model, checked before any data or weights load
        unlabelled = UnlabelledRows.set_aside(args.data, distill)  # NEW: empty label cells, --transfer_file
        prepared = prepare(args, train_file=unlabelled.labelled_file)  # NEW: the labelled rows
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        # NEW: the teacher's logits (computed once, cached, the teacher freed) packed into the training
        # NEW: rows' labels, unlabelled rows added; the loss mixes the teacher's term and the gold label's
        data, distill_loss = add_teacher_targets(prepared, distill, unlabelled)  # NEW
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
            compute_loss_func=distill_loss,  # NEW: alpha x teacher term + (1 - alpha) x the task's loss
            callbacks=run.callbacks(model),  # memory phases, tokens/s, precision, W&B curves, early stopping
        )
        run.clear_previous_run()  # --overwrite_output_dir: the old run is deleted here, after every check
        train_result = trainer.train(resume_from_checkpoint=run.resume_from)
        trainer.save_model()
        evaluation = run.final_evaluation(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, evaluation, prepared)


if __name__ == "__main__":
    run_main(main)
