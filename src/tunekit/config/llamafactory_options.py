"""Every option name LLaMA-Factory's parser accepts, as data (no LLaMA-Factory import).

Used for one message: an unknown option that is a LLaMA-Factory option is reported as "a LLaMA-Factory
option that tunekit does not support (yet)" instead of a "did you mean" that points at an unrelated
tunekit option. Which of these tunekit does not support is computed at run time as
``LLAMAFACTORY_OPTIONS - set(Config.model_fields)`` (:func:`unsupported`), never listed by hand, so an option
gains support by being added to the schema and nothing here changes.

Sources: the dataclass fields with ``init=True`` of LLaMA-Factory's ``src/llamafactory/hparams/``
(``model_args.py``, ``data_args.py``, ``finetuning_args.py``, ``generating_args.py``, ``training_args.py``;
upstream as of 2025), and the Hugging Face ``Seq2SeqTrainingArguments`` that its ``TrainingArguments``
extends: the fields of transformers 5 plus the transformers 4 fields LLaMA-Factory configs still use
(LLaMA-Factory pins transformers 4.x).
"""

from __future__ import annotations

from typing import Iterable

MODEL_ARGS = (
    # BaseModelArguments
    "model_name_or_path", "adapter_name_or_path", "adapter_folder", "cache_dir", "use_fast_tokenizer", "resize_vocab",
    "split_special_tokens", "add_tokens", "add_special_tokens", "new_special_tokens", "new_special_tokens_config",
    "init_special_tokens", "model_revision", "low_cpu_mem_usage", "rope_scaling", "flash_attn", "shift_attn",
    "mixture_of_depths", "use_unsloth", "use_unsloth_gc", "enable_liger_kernel", "moe_aux_loss_coef",
    "disable_gradient_checkpointing", "use_reentrant_gc", "upcast_layernorm", "upcast_lmhead_output",
    "train_from_scratch", "infer_backend", "offload_folder", "use_cache", "use_kv_cache", "use_v1_kernels",
    "infer_dtype", "hf_hub_token", "ms_hub_token", "om_hub_token", "print_param_status", "trust_remote_code",
    # QuantizationArguments
    "quantization_method", "quantization_bit", "quantization_type", "double_quantization", "quantization_device_map",
    "fp8", "fp8_backend", "fp8_enable_fsdp_float8_all_gather",
    # ProcessorArguments
    "image_max_pixels", "image_min_pixels", "image_do_pan_and_scan", "crop_to_patches", "video_max_pixels",
    "video_min_pixels", "video_fps", "video_maxlen", "use_audio_in_video", "audio_sampling_rate",
    "image_resolution", "video_resolution",
    # ExportArguments
    "export_dir", "export_size", "export_device", "export_quantization_bit", "export_quantization_dataset",
    "export_quantization_nsamples", "export_quantization_maxlen", "export_legacy_format", "export_hub_model_id",
    # VllmArguments, SGLangArguments, KTransformersArguments
    "vllm_maxlen", "vllm_gpu_util", "vllm_enforce_eager", "vllm_max_lora_rank", "vllm_config",
    "sglang_maxlen", "sglang_mem_fraction", "sglang_tp_size", "sglang_config", "sglang_lora_backend",
    "use_kt", "kt_optimize_rule", "cpu_infer", "chunk_size", "mode", "kt_maxlen", "kt_use_cuda_graph", "kt_mode",
    "kt_force_think",
)

DATA_ARGS = (
    "template", "dataset", "eval_dataset", "dataset_dir", "media_dir", "cutoff_len", "train_on_prompt", "mask_history",
    "streaming", "buffer_size", "mix_strategy", "interleave_probs", "overwrite_cache", "preprocessing_batch_size",
    "preprocessing_num_workers", "max_samples", "eval_num_beams", "ignore_pad_token_for_loss", "val_size",
    "eval_on_each_dataset", "packing", "neat_packing", "tool_format", "default_system", "enable_thinking",
    "tokenized_path", "data_shared_file_system",
)

FINETUNING_ARGS = (
    # FreezeArguments
    "freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules",
    # LoraArguments
    "additional_target", "lora_alpha", "lora_dropout", "lora_rank", "lora_target", "loraplus_lr_ratio",
    "loraplus_lr_embedding", "use_rslora", "use_dora", "pissa_init", "pissa_iter", "pissa_convert", "create_new_adapter",
    # OFTArguments
    "module_dropout", "oft_rank", "oft_block_size", "oft_target",
    # RLHFArguments
    "pref_beta", "pref_ftx", "pref_bco_weight", "pref_loss", "dpo_label_smoothing", "kto_chosen_weight",
    "kto_rejected_weight", "simpo_gamma", "ppo_buffer_size", "ppo_epochs", "ppo_score_norm", "ppo_target",
    "ppo_whiten_rewards", "ref_model", "ref_model_adapters", "ref_model_quantization_bit", "reward_model",
    "reward_model_adapters", "reward_model_quantization_bit", "reward_model_type", "ld_alpha",
    # GaloreArguments, ApolloArguments, BAdamArgument
    "use_galore", "galore_target", "galore_rank", "galore_update_interval", "galore_scale", "galore_proj_type",
    "galore_layerwise",
    "use_apollo", "apollo_target", "apollo_rank", "apollo_update_interval", "apollo_scale", "apollo_proj",
    "apollo_proj_type", "apollo_scale_type", "apollo_layerwise", "apollo_scale_front",
    "use_badam", "badam_mode", "badam_start_block", "badam_switch_mode", "badam_switch_interval", "badam_update_ratio",
    "badam_mask_mode", "badam_verbose",
    # SwanLabArguments
    "use_swanlab", "swanlab_project", "swanlab_workspace", "swanlab_run_name", "swanlab_mode", "swanlab_api_key",
    "swanlab_logdir", "swanlab_lark_webhook_url", "swanlab_lark_secret",
    # FinetuningArguments
    "pure_bf16", "stage", "finetuning_type", "use_llama_pro", "use_adam_mini", "use_mca", "use_muon", "use_dft_loss",
    "use_asft_loss", "asft_alpha", "use_eaft_loss", "eaft_alpha", "use_hyper_parallel", "hyper_parallel_args",
    "freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model", "compute_accuracy",
    "disable_shuffling", "early_stopping_steps", "plot_loss", "include_effective_tokens_per_second",
)

GENERATING_ARGS = (
    "do_sample", "temperature", "top_p", "top_k", "num_beams", "max_length", "max_new_tokens", "repetition_penalty",
    "length_penalty", "skip_special_tokens", "system_message",
)

TRAINING_ARGS = (
    # LLaMA-Factory's TrainingArguments and RayArguments
    "overwrite_output_dir", "ray_run_name", "ray_storage_path", "ray_storage_filesystem", "ray_num_workers",
    "resources_per_worker", "placement_strategy", "ray_init_kwargs",
    # Seq2SeqTrainingArguments (transformers 5)
    "output_dir", "per_device_train_batch_size", "num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type",
    "lr_scheduler_kwargs", "warmup_steps", "optim", "optim_args", "weight_decay", "adam_beta1", "adam_beta2",
    "adam_epsilon", "optim_target_modules", "gradient_accumulation_steps", "average_tokens_across_devices",
    "max_grad_norm", "label_smoothing_factor", "bf16", "fp16", "bf16_full_eval", "fp16_full_eval", "tf32",
    "activation_checkpointing", "activation_checkpointing_kwargs", "gradient_checkpointing",
    "gradient_checkpointing_kwargs", "torch_compile", "torch_compile_backend", "torch_compile_mode", "use_liger_kernel",
    "liger_kernel_config", "neftune_noise_alpha", "torch_empty_cache_steps", "auto_find_batch_size",
    "logging_strategy", "logging_steps", "logging_first_step", "log_on_each_node", "logging_nan_inf_filter",
    "include_num_input_tokens_seen", "log_level", "log_level_replica", "disable_tqdm", "report_to", "run_name",
    "project", "trackio_space_id", "eval_strategy", "eval_steps", "eval_delay", "per_device_eval_batch_size",
    "prediction_loss_only", "eval_on_start", "eval_do_concat_batches", "eval_use_gather_object",
    "eval_accumulation_steps", "include_for_metrics", "batch_eval_metrics", "save_only_model", "save_strategy",
    "save_steps", "save_on_each_node", "save_total_limit", "push_to_hub", "hub_token", "hub_private_repo",
    "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision", "load_best_model_at_end",
    "metric_for_best_model", "greater_is_better", "ignore_data_skip", "restore_callback_states_from_checkpoint",
    "full_determinism", "seed", "data_seed", "use_cpu", "accelerator_config", "parallelism_config",
    "dataloader_drop_last", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
    "dataloader_prefetch_factor", "remove_unused_columns", "label_names", "train_sampling_strategy",
    "length_column_name", "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_backend",
    "ddp_timeout", "fsdp", "fsdp_config", "deepspeed", "debug", "skip_memory_metrics", "do_train", "do_eval",
    "do_predict", "resume_from_checkpoint", "local_rank", "sortish_sampler", "predict_with_generate",
    "generation_max_length", "generation_num_beams", "generation_config",
    # TrainingArguments fields of transformers 4.x (removed or renamed in 5)
    "warmup_ratio", "evaluation_strategy", "logging_dir", "save_safetensors", "include_tokens_per_second",
    "group_by_length", "no_cuda", "use_mps_device", "fp16_opt_level", "half_precision_backend", "fp16_backend",
    "jit_mode_eval", "use_ipex", "tpu_num_cores", "tpu_metrics_debug", "past_index", "ray_scope", "torchdynamo",
    "dispatch_batches", "split_batches", "push_to_hub_model_id", "push_to_hub_organization", "push_to_hub_token",
    "include_inputs_for_metrics", "mp_parameters", "use_legacy_prediction_loop", "save_safetensors", "fsdp_min_num_params",
    "fsdp_transformer_layer_cls_to_wrap", "overwrite_output_dir",
)

LLAMAFACTORY_OPTIONS = frozenset(MODEL_ARGS + DATA_ARGS + FINETUNING_ARGS + GENERATING_ARGS + TRAINING_ARGS)


def unsupported(known: Iterable[str]) -> frozenset[str]:
    """LLaMA-Factory options that are not (yet) options of tunekit's schema ``known``."""
    return LLAMAFACTORY_OPTIONS - frozenset(known)
