"""QLoRA: LoRA on a frozen base whose linear layers are stored in 4-bit NF4 (bitsandbytes), or in 8 bits.

    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --config recipes/configs/qlora.yaml
    accelerate launch -q --config_file accelerate_configs/single_gpu.yaml recipes/qlora.py --base_bits 8

Everything as in lora.py (same options, learning rate and saved adapter), but the encoder's linear
weights are NF4 with double quantization (4.13 bits per weight), their matmuls in the run's precision
(bf16 on GPUs that have it natively, fp16 on older ones, fp32 on CPUs). --base_bits 8 loads the base
in bitsandbytes' LLM.int8 instead (1 B per weight). NEW marks what QLoRA changes.
"""

from recipes_lib.config.parsing import parse_arguments
from recipes_lib.config.registry import RECIPES
from recipes_lib.data.tokenize import padding_collator
from recipes_lib.modeling.adapters import (  # NEW
    add_lora,
    base_quantization_config,
    check_base_support,
    prepare_4bit_model,
    save_adapter_extras,
)
from recipes_lib.modeling.loading import load_model
from recipes_lib.run import RecipeRun, prepare, run_main
from recipes_lib.training.trainer import RecipeTrainer

SPEC = RECIPES["qlora"]  # NEW: lora.py's options and --base_bits, learning rate 1e-3


def main(argv=None):
    args = parse_arguments(SPEC, argv)
    lora = args.options(SPEC.options)  # NEW
    check_base_support(args.training.device, lora.base_bits)  # NEW: they run here, before anything loads
    with RecipeRun(args, SPEC) as run:  # refuses another run's output_dir; resolves resume; seeds
        prepared = prepare(args, SPEC)  # every decision made once; the data tokenized
        data, tokenizer, model_config = prepared.data.tokenized, prepared.tokenizer, prepared.model_config
        training_args = prepared.training_args
        run.start_tracking(prepared)  # the W&B run (offline without an API key); memory phases begin
        quantization = base_quantization_config(model_config, training_args.precision, lora.base_bits)  # NEW
        device_map = {"": training_args.device}  # NEW: quantized as the weights land there (they cannot move)
        model = load_model(
            prepared.model_args, model_config, quantization_config=quantization, device_map=device_map
        )
        model = add_lora(prepare_4bit_model(model), lora)  # NEW: frozen quantized base; adapters, head train
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
        merged = None  # NEW: --merge_adapter's model, scored in memory by write_results
        if run.is_main_process:  # NEW: config.json (label names) and the base's bits; the merged model
            merged = save_adapter_extras(  # NEW
                prepared.arguments, model_config, tokenizer, lora, quantization
            )  # NEW
        metrics = run.final_metrics(trainer)  # the last epoch's evaluation if the weights are unchanged
        return run.write_results(trainer, train_result, metrics, prepared, merged)  # NEW: merged, scored


if __name__ == "__main__":
    run_main(main)
