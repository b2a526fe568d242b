"""The English templates of the refusals of a LLaMA-Factory v1 config (``config/llamafactory_v1.py``,
``llamafactory_v1_plugins.py``, ``llamafactory_v1_data.py``): key → template, part of
:data:`tunekit.config.problem_texts.ENGLISH`. The web board says each again in Chinese (``webui/problems_zh_v1.py``).

``v1_refused`` is a refusal of one v1 key; its ``why`` is one of the ``part_v1_*`` reasons.
"""

from __future__ import annotations

ENGLISH_V1: dict[str, str] = {
    # the reader (llamafactory_v1_plugins.py: V1Reader)
    "v1_refused": "LLaMA-Factory v1 `{key}: {value}` (in {path}): {why}.",
    "v1_unknown_key": "Unknown key `{key}` (in {path}): LLaMA-Factory v1's {name} takes {words}.",
    "part_v1_expected_one_of": "expected one of {words}",
    "part_v1_block": "a plugin block is a mapping with a name (name: ...)",
    # the plugin blocks (llamafactory_v1_plugins.py)
    "part_v1_cast_fp32": "tunekit keeps trained weights in float32 under mixed precision; to train in bfloat16 give "
    "pure_bf16=true on the command line and remove this key",
    "part_v1_peft_names": "tunekit reads v1's lora and freeze",
    "part_v1_dcp_path": "tunekit loads the model from its Hugging Face folder (model), not from a torch.distributed "
    "checkpoint: remove dcp_path",
    "part_v1_ds_config_file": "DeepSpeed needs its JSON file",
    "part_v1_fsdpturbo": "FSDPTurbo expert parallelism (ep_size {ep_size}: each process holds a share of the "
    "experts) is not in tunekit; use dist_config name fsdp2 (FSDP2 shards the experts with the other weights) or "
    "deepspeed",
    "part_v1_dist_names": "tunekit reads v1's fsdp2 and deepspeed",
    "part_v1_kernel_missing": "{kernels} are not in tunekit: remove it",
    "part_v1_kernel_fla": "flash-linear-attention's kernels for linear-attention layers (Qwen3.5 / Qwen3-Next)",
    "part_v1_kernel_fused_moe": "the fused mixture-of-experts CUDA kernel",
    "part_v1_kernel_npu": "Ascend NPU kernels",
    "part_v1_kernel_unknown": "not a v1 kernel tunekit knows (auto, liger_kernel)",
    "part_v1_quant_names": "tunekit reads v1's bnb and auto (bitsandbytes)",
    "part_v1_compute_dtype": "tunekit computes in the run's precision (bf16 / fp16 / fp32, chosen for the device or "
    "set by bf16): remove compute_dtype",
    "part_v1_init_names": "expected init_on_meta, init_on_rank0 or init_on_default",
    "part_v1_optim_names": "tunekit reads v1's muon (other optimizers: optim)",
    "part_v1_two_numbers": "expected two numbers",
    "part_v1_muon_fixed": "tunekit's Muon runs with {key} {fixed}",
    "part_v1_scheduler": "tunekit's schedule is lr_scheduler_type (linear, cosine, ...) with warmup_steps: remove the "
    "block and give them on the command line",
    # the rest of a v1 config (llamafactory_v1.py)
    "v1_unknown_option": "Unknown LLaMA-Factory v1 option '{key}' (in {path}, read as a v1 config because it has "
    "{marks}).{hint}{own}",
    "part_v1_own_option": " A v1 config takes v1 option names only: give tunekit's {key} on the command line "
    "({key}=VALUE).",
    "part_v1_save_epochs": "tunekit saves every epoch (save_epochs: 1) or every N steps: use save_steps (steps per "
    "epoch: `tunekit plan`)",
    "part_v1_dp_size": "tunekit runs one data-parallel group of all {world} processes ({how}){groups}, sharded over "
    "all of them: remove {key}",
    "part_v1_cp_groups": ", each sequence group of cp_size {cp} processes counting once",
    "part_v1_how_world_size": "WORLD_SIZE",
    "part_v1_how_nproc": "NPROC_PER_NODE x NNODES",
    "part_v1_how_one": "one process (no WORLD_SIZE or NPROC_PER_NODE)",
    "part_v1_mp_replicate": "hybrid sharding (shards replicated over groups of processes) is not in tunekit: remove "
    "mp_replicate_size (FSDP shards over all processes)",
    "part_v1_model_class": "tunekit trains causal language models (model_class: llm); for a reward model use "
    "stage=rm on the command line",
    "part_v1_full_determinism": "tunekit has no full-determinism switch (deterministic kernels): remove it; runs are "
    "seeded by seed",
    "part_v1_ld_alpha": "LD-DPO's length weighting is not in tunekit: remove it",
    "part_v1_custom_chat_template": "tunekit renders with a named template or the model's own (template: jinja): put "
    "the Jinja text in the tokenizer's chat_template, or name a template (`tunekit templates`) on the command line",
    "part_v1_whole_number": "expected a whole number",
    "part_v1_processes": "micro_batch_size {micro} x {world} data-parallel process(es) ({how})",
    "part_v1_global_multiple": "it must be a multiple of {processes} = {product}, as in v1",
    # v1's datasets (llamafactory_v1_data.py)
    "part_v1_expected_path": "expected a path (text)",
    "part_v1_list_missing": "no such file in {cwd} (v1 reads it from the current folder, and would otherwise "
    "download it from the Hugging Face hub); tunekit reads local dataset lists only: run from the folder it is "
    "relative to, or download it",
    "part_v1_hub_dataset": "neither a file nor a folder in {cwd}, so v1 reads a Hugging Face hub dataset; tunekit "
    "reads hub datasets registered in dataset_info.json (hf_hub_url): register it and give dataset=NAME on the "
    "command line, or download it",
    "part_v1_unreadable": "cannot be read ({error})",
    "part_v1_list_form": "a v1 dataset list maps names to {{path, source, ...}}",
    "part_v1_draws_differ": "its entry for {path} draws {draw}, the other dataset list's {other}; tunekit names a "
    "dataset by its file, so one file has one size / weight",
    "v1_list_entry": "LLaMA-Factory v1 dataset list `{key}: {file}`, entry '{name}' (in {path}): {problem}.",
    "part_v1_entry_size": "size: {size} must be a whole number of samples, at least 1 (remove it to read every record "
    "once)",
    "part_v1_entry_weight": "weight: {weight} must be a number above 0 (remove it to read every record once)",
    "part_v1_entry_twice": "path {entry} is read by an earlier entry too; tunekit names a dataset by its file, so one "
    "file has one size / weight: merge the entries",
    "part_v1_entry_needs_path": "needs path: a file or folder",
    "part_v1_entry_keys": "unknown key(s) {wrong}; v1 reads {allowed}",
    "part_v1_entry_hub": "source {source} ({entry}) is a hub dataset; tunekit reads hub datasets registered in "
    "dataset_info.json (hf_hub_url): register it and give dataset=NAME on the command line, or download it",
    "part_v1_entry_missing": "path {entry} does not exist in {cwd} (v1 reads it from the current folder)",
    "part_v1_entry_split": "split {split}: a local file is read whole (its one split is train); remove split",
    "part_v1_entry_converter": "converter {converter}: tunekit recognises alpaca, sharegpt and v1 message records in "
    "a file given by path; register the file in dataset_info.json with its columns instead",
    "part_v1_entry_streaming": "streaming: true; tunekit reads datasets whole: remove streaming",
}

# placeholder → how a tuple of values is joined in English (added to problem_texts.JOINS)
JOINS_V1: dict[str, str | tuple[str, str]] = {"marks": ", "}
