"""The config's problems in Chinese: one template per key of :data:`tunekit.config.problem_texts.ENGLISH`, with the
same placeholders and format specs (``tests/webui/test_problems_zh.py`` holds every key to one), written for a
Chinese ML practitioner; option names, values, paths and code stay as they are.

:func:`say` is how the board shows a problem's message in the page's language: a keyed message
(:class:`~tunekit.config.problems.Said`) is said again from its key and values, never by reading the English back; a
message made as plain text is shown as it is; :func:`say_error` says a refused action's error (its keyed problems, or
its keyed message) the same way. A LLaMA-Factory v1 config's refusals are in ``problems_zh_v1.py``, the memory
planner's errors in ``problems_zh_plan.py``, a data file's and a record's errors in ``problems_zh_data.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tunekit.config.problem_texts import ENGLISH, JOINS
from tunekit.messages import Keyed, merged, render

from .problems_zh_api import ZH_API
from .problems_zh_data import ZH_DATA
from .problems_zh_export import JOINS_ZH_EXPORT, ZH_EXPORT
from .problems_zh_infer import JOINS_ZH_INFER, ZH_INFER
from .problems_zh_plan import JOINS_ZH_PLAN, RUNGS_ZH, ZH_PLAN
from .problems_zh_predict import ZH_PREDICT
from .problems_zh_run import JOINS_ZH_RUN, ZH_ENV, ZH_RUN
from .problems_zh_v1 import JOINS_ZH_V1, ZH_V1

_CONFIG_ZH: dict[str, str] = {
    "part_pt_packing_default": "（pt 阶段默认开启）",
    "padding_free_packing": "padding_free 与 packing{default} 是两种去除填充的方式：请二选一（用 padding_free：把"
    "每个微批次的样本直接拼接，并设 packing: false；或用 packing，并删除 padding_free）。",
    "batching_strategy_disagrees": "batching_strategy {strategy}（LLaMA-Factory 的参数名）与 padding_free "
    "{padding_free} / max_tokens_per_batch {budget} 不一致：只保留 batching_strategy，或只用 tunekit 的 "
    "padding_free 和 max_tokens_per_batch。",
    "budget_kto": "kto 阶段不支持 max_tokens_per_batch：它的 KL 估计是在每个微批次上计算的，批次大小不固定会改变损"
    "失；请删除 max_tokens_per_batch（padding_free 可以去掉 kto 的填充）。",
    "budget_stage": "max_tokens_per_batch 只用于 sft、pt、dpo 和 rm 阶段（当前 stage 为 {stage}）：请删除 "
    "max_tokens_per_batch。",
    "budget_below_pair": "max_tokens_per_batch {budget} 小于 2 x cutoff_len {cutoff}：{stage} 的一对样本是两条最长"
    " cutoff_len 个 token 的序列，必须放进同一个微批次；请把 max_tokens_per_batch 设为至少 {least}（例如 {example}"
    "），或减小 cutoff_len。",
    "budget_below_cutoff": "max_tokens_per_batch {budget} 小于 cutoff_len {cutoff}：长度为 cutoff_len 的样本永远放"
    "不进一个微批次；请把 max_tokens_per_batch 设为至少 {cutoff}（例如 {example}），或减小 cutoff_len。",
    "budget_group_by_length": "max_tokens_per_batch 自行组批（有填充时已按长度分组），group_by_length 则对采样器分"
    "组：请删除 group_by_length。",
    "budget_too_large": "max_tokens_per_batch {budget:,} 超过单个微批次 {limit:,}（2**31 - 1）个 token 的上限：请"
    "改用更小的值。",
    "neat_packing_needs_packing": "neat_packing 需要 packing：请设置 packing: true。",
    "neat_packing_pt": "neat_packing 只用于 sft：pt 的 packing 把一整段连续文本切成 cutoff_len 长的块，没有需要彼"
    "此隔开的样本；请删除 neat_packing。",
    "interleave_probs_concat": "设置了 interleave_probs，但 mix_strategy 为 concat：请设置 mix_strategy: "
    "interleave_under 或 interleave_over。",
    "packing_stage": "{stage} 阶段不支持 packing：请删除 packing（它只用于 {stages}）。",
    "padding_free_stage": "{stage} 阶段不支持 padding_free：请删除 padding_free（它只用于 {stages}）。",
    "thought_weight_stage": "thought_loss_weight {weight:g} 只用于 sft 阶段（当前 stage 为 {stage}）：{stage} 对每"
    "条回复整体打分或给奖励，思考过程也包含在内；请删除 thought_loss_weight。",
    "thought_weight_no_thinking": "thought_loss_weight {weight:g} 与 enable_thinking: false 同时设置：不会训练任何"
    "思考过程（思考内容被移除，空的 `<think></think>` 块属于提示部分）；请删除 thought_loss_weight，或设置 "
    "enable_thinking: true。",
    "thought_weight_loss": "thought_loss_weight {weight:g}（对思考过程加权）与 {name} 各自计算 token 损失：请删除"
    "其中一个。",
    "dataset_empty_name": "{option} {text} 的逗号之间有空名称：请删除多余的逗号。",
    "micro_batch_too_large": "{name} {batch} x cutoff_len {cutoff} = 单个微批次 {tokens:,} 个 token，超过 "
    "{limit:,}（2**31 - 1）：计算核用 32 位整数索引批次中的元素，也没有设备放得下它的激活值；请减小 {name}（需要更"
    "大的等效批次时增大 gradient_accumulation_steps）。",
    "output_is_loaded": "output_dir {output_dir} 就是 {name} 的目录 {path}：训练会把权重和文件写进它读取的目录；请"
    "换一个新的 output_dir。",
    "max_steps_invalid": "max_steps {steps} 不是有效的步数：请填写正的优化步数，或填 -1（默认值）按 "
    "num_train_epochs 训练。",
    "warmup_steps_invalid": "warmup_steps {steps} 既不是小于 1 的比例（占总步数的份额），也不是整数步数：请填写如 "
    "0.1 或 100。",
    "warmup_steps_and_ratio": "warmup_steps 是比例（即预热比例），同时又设置了 warmup_ratio：请只保留其中一个。",
    "neftune_stage": "neftune_noise_alpha（NEFTune）不能用于 {stage} 阶段：{why}。请删除 neftune_noise_alpha。",
    "part_neftune_rm": "奖励模型的价值头包装器没有可供 transformers 挂钩的输入嵌入层",
    "part_neftune_ppo": "价值头包装器没有可供 transformers 挂钩的输入嵌入层，而且 rollout 的对数概率是在无噪声时计"
    "算的，策略比率会拿加噪与未加噪的对数概率作比较",
    "part_neftune_grpo": "rollout 的对数概率是在无噪声时计算的，策略比率会拿加噪与未加噪的对数概率作比较",
    "neftune_reference": "{stage} 阶段使用 finetuning_type {method} 时设置了 neftune_noise_alpha（NEFTune）：参考"
    "模型就是关闭适配器的策略模型，它的对数概率也会被加噪。请设置 ref_model 或 precompute_ref_log_probs: true（这"
    "样的参考模型不受噪声影响），或删除 neftune_noise_alpha。",
    "val_size_invalid": "val_size {size} 既不是小于 1 的比例，也不是整数样本数：请填写如 0.1 或 100。",
    "val_size_and_eval_dataset": "同时设置了 val_size 和 eval_dataset：请在划出的验证集（val_size）或 "
    "eval_dataset 上评估，二者只选其一。",
    "eval_needs_data": "eval_strategy '{strategy}' 需要评估数据：请设置 val_size（如 0.1）或 eval_dataset，或设置 "
    "eval_strategy: no。",
    "best_needs_eval": "load_best_model_at_end 需要评估：请设置 eval_strategy: steps（以及 val_size 或 "
    "eval_dataset）。",
    "best_needs_same_strategy": "load_best_model_at_end 要求 save_strategy 与 eval_strategy 相同（当前为 {save} 与"
    " {eval}）。",
    "steps_invalid": "{name} {value:g} 既不是小于 1 的比例（占训练步数的份额），也不是整数步数：请填写如 {whole} "
    "或 0.1。",
    "best_needs_save_at_eval": "load_best_model_at_end 需要在每次评估时都有检查点：save_steps {save:g} 必须是 "
    "eval_steps {every:g}{tail} 的整数倍（两者都是整数步数，或都是小于 1 的比例）：请调整 save_steps 或 eval_steps"
    "。",
    "part_eval_every_logging": "（未设置 eval_steps，按 logging_steps）",
    "plateau_needs_eval": "lr_scheduler_type reduce_lr_on_plateau 在验证损失不再下降时降低学习率，因此需要评估：请"
    "设置 eval_strategy: steps（以及 val_size 或 eval_dataset），或换一种 lr_scheduler_type。",
    "scheduler_takes_no_kwargs": "lr_scheduler_type {scheduler} 不接受 lr_scheduler_kwargs（Hugging Face 会忽略它"
    "们）：请删除 lr_scheduler_kwargs（{names}）。",
    "scheduler_kwargs_wrong": "lr_scheduler_kwargs 中的 {wrong} 不被 lr_scheduler_type {scheduler} 接受；{takes}",
    "part_scheduler_takes": "它接受：{allowed}。",
    "part_scheduler_takes_none": "它不接受任何参数：请删除 lr_scheduler_kwargs。",
    "llama_pro_needs_freeze": "use_llama_pro 只训练扩展出的块，在 tunekit 中需配合 finetuning_type: freeze（当前为"
    " '{method}'；暂不支持在扩展块上用 LoRA）：请设置 finetuning_type: freeze，并把 freeze_trainable_layers 设为新"
    "增块的数量。",
    "optimizers_several": "{custom} 都是优化器：请只选一个。",
    "optimizer_and_loraplus": "{name} 和 loraplus_lr_ratio 都会自行构建优化器：请只选一个。",
    "projected_with_adapter": "{name} 以更少的优化器显存训练全部权重；不能与 finetuning_type '{method}' 同时使用（"
    "适配器本身已经很小）：请设置 finetuning_type: full，或删除 {name}。",
    "projection_sharded": "{name} 为每个完整的权重矩阵保存投影，不能在 {engine}（分片权重）下运行：请删除 {option}"
    "，或在单个设备上使用 BAdam（use_badam）。",
    "layerwise_accumulation": "{name} 在反向传播中逐个更新权重，因此无法累积梯度：请设置 "
    "gradient_accumulation_steps: 1（改为增大 per_device_train_batch_size），或设置 {name}: false。",
    "galore_optim": "use_galore 需配合 optim adamw_torch（或 adamw_8bit、`adafactor`），不能用 {optim}：请设置 "
    "optim: adamw_torch。",
    "apollo_optim": "use_apollo 需配合 optim adamw_torch，不能用 {optim}：请设置 optim: adamw_torch。",
    "badam_ratio_clipping": "badam_mode: ratio 更新的是稀疏梯度，torch 的梯度裁剪无法计算其范数：请设置 "
    "max_grad_norm: 0（或改用 badam_mode: layer）。",
    "badam_fsdp": "use_badam 不能在 FSDP 下运行：请删除 fsdp（BAdam 在单个设备上运行）。",
    "badam_deepspeed": "在 tunekit 中 use_badam 不能在 DeepSpeed 下运行：在 ZeRO-3 下 BAdam 的更新与单设备更新不一"
    "致，ratio 模式更是完全不支持 DeepSpeed。请删除 deepspeed（BAdam 本就是为在单个 GPU 上全参数微调大模型而设计）"
    "，或在 deepspeed 下使用 AdamW。",
    "pure_bf16_mixed": "pure_bf16 不使用自动混合精度训练，因此必须关闭 bf16/fp16 混合精度：请删除 bf16/fp16（"
    "pure_bf16 会自行以 bf16 加载权重）。",
    "pure_bf16_dtype": "pure_bf16 以 bfloat16 加载模型，但 dtype 为 {dtype}：请删除 dtype，或设置 dtype: bfloat16。",
    "pure_bf16_zero3": "pure_bf16 不能在 DeepSpeed ZeRO-3 下运行（它自己保存 fp32 主权重）：请改用 bf16: true，或 "
    "ZeRO-2 预设。",
    "fp8_msamp": "不支持 fp8_backend msamp：请使用 fp8_backend: torchao（或 auto）或 te。",
    "fp8_quantization": "fp8 与 quantization_bit 不能同时使用（FP8 训练以 8 位计算；QLoRA 保存 4/8 位的基座）：请"
    "删除其中一个。",
    "fp8_all_gather_fsdp": "fp8_enable_fsdp_float8_all_gather 需要 fsdp：请设置 fsdp: full_shard，或删除该参数。",
    "sft_losses_several": "{custom} 是可互相替代的 SFT 损失：请只选一个。",
    "sft_loss_stage": "{name} 是 SFT 损失（sft 阶段），但当前 stage 为 {stage}：请设置 stage: sft，或删除 {name}。",
    "fsdp_config_alone": "只有运行 FSDP 时才会读取 fsdp_config：请设置 fsdp（例如 fsdp: full_shard），或删除 "
    "fsdp_config。",
    "cp_stage": "cp_size {cp} 把每条序列分到 {cp} 个进程上计算 sft 或 pt 阶段的逐词元损失；stage {stage} 按整条序列"
    "打分（偏好对、奖励或采样），tunekit 不会将其拆分。请去掉 cp_size，或改用 stage: sft。",
    "cp_deepspeed": "cp_size {cp} 在 DDP 或 FSDP2 下运行 Ulysses 上下文并行；tunekit 未接入 DeepSpeed 自带的序列并行"
    "（ALST）。请去掉 deepspeed（fsdp: full_shard 同样会切分权重）或 cp_size。",
    "cp_eager": "cp_size {cp} 对汇集后的整条序列只用因果掩码做注意力，eager 注意力（flash_attn: {value}）做不到："
    "请使用 flash_attn: sdpa（或 auto，GPU 上也可用 fa2），或去掉 cp_size。",
    "cp_whole_sequence": "cp_size {cp} 与 {option} 不能同时使用：它需要每条完整序列都在一个进程中（ASFT 的参考模型要"
    "对整条序列做注意力；NEFTune 按序列长度缩放噪声），tunekit 不会拆分它。请去掉其中之一。",
    "cp_changes_attention": "cp_size {cp} 与 {option} 不能同时使用：它会改变上下文并行所拆分的注意力（在每条序列前或"
    "每层的键值中加入虚拟词元，或使用自己的注意力代码）。请改用 lora，或去掉 cp_size。",
    "cp_batching": "cp_size {cp} 拆分的是普通的补齐行，且同一序列组的每个进程按相同顺序取行；{option} 会改变行的内容"
    "或哪些行组成一批。请去掉 {option} 或 cp_size。",
    "fsdp_wrap_needs_shard": "fsdp_transformer_layer_cls_to_wrap 指定 FSDP 按哪些类分片，因此需要 fsdp: "
    "full_shard 或 shard_grad_op；请设置 fsdp，或删除 fsdp_transformer_layer_cls_to_wrap。",
    "trackers_unknown": "report_to 中有未知的实验记录工具 {trackers}：可用的有 {known}。",
    "pixels_min_over_max": "{low} {lo} 大于 {high} {hi}：请减小 {low} 或增大 {high}。",
    "all_frozen": "freeze_vision_tower、freeze_multi_modal_projector 与 freeze_language_model 都为 true：没有任何"
    "参数会被训练。请设置 freeze_language_model: false（通常的做法），或解冻视觉编码器或投影层。",
    "checkpointing_disagree": "gradient_checkpointing 与 disable_gradient_checkpointing 相互矛盾：请只设置其中一个。",
    "v1_kernels": "use_v1_kernels: true 要求使用 LLaMA-Factory v1 的融合算子（Ascend NPU 上的 RMSNorm、RoPE、"
    "SwiGLU 和 MoE），tunekit 没有这些算子：请删除该参数（或设为 false）；在 GPU 上使用融合算子请设置 "
    "enable_liger_kernel: true，使用 FlashAttention-2 请设置 flash_attn: fa2。",
    "moe_aux_stage": "moe_aux_loss_coef 把路由损失加到 sft 和 pt 阶段的语言模型损失上；{stage} 阶段自行计算损失，"
    "不含它：请删除 moe_aux_loss_coef。",
    "special_tokens_twice": "new_special_tokens_config 与 add_special_tokens 都指定了要添加的特殊 token：请只保留一个"
    "（把所有 token 写进 YAML 文件，或删除 new_special_tokens_config）。",
    "desc_init_needs_config": "init_special_tokens: {value} 用每个新 token 的描述来初始化它，而描述只能由 "
    "new_special_tokens_config 提供：请把 new_special_tokens_config 设为每行 `token: description` 的 YAML 文件，"
    "或使用 init_special_tokens: noise_init。",
    "special_tokens_file_missing": "new_special_tokens_config {path} 不存在（或不是文件）：请填写每行 "
    "`token: description` 的 YAML 文件。",
    "part_special_tokens_nothing": "空内容（文件为空）",
    "special_tokens_file_invalid": "new_special_tokens_config {path} 不是有效的 YAML：{why}",
    "special_tokens_not_mapping": "new_special_tokens_config {path} 必须是每行 `token: description` 的映射，实际为 "
    '{kind}：请每个新 token 写一行，例如 `"<|start_of_svg|>": "Marks the beginning of an SVG"`。',
    "special_tokens_empty_token": "new_special_tokens_config {path} 中有一个空的或不是文本的 token（{token}）："
    "每个键都必须是 token 的文本（请加引号）；请删除该行或写上 token。",
    "special_tokens_description": "new_special_tokens_config {path}：{token} 的描述是 {kind}，不是文本：请加引号"
    '（`{token}: "..."`）或写一句描述。',
    "export_bnb_dataset": "export_quantization_dataset 是 GPTQ 的校准数据，但 export_quantization_method 为 bnb（"
    "无需数据，它不会被使用）：请删除 export_quantization_dataset，或设置 export_quantization_method: gptq。",
    "gguf_type_needs_gguf": "export_gguf_type（{type}）只用于 GGUF 导出：请设置 export_format: gguf，或删除 "
    "export_gguf_type。",
    "gguf_safetensors_option": "{name} 只用于 safetensors 导出；GGUF 导出是由 llama.cpp 量化的单个文件：请删除 "
    "{name}，并改为设置 export_gguf_type（f32、f16、bf16、q8_0、q4_k_m）。",
    "lora_only_one": "{names} 是 LoRA 参数，但 finetuning_type 为 '{method}'：请删除它，或设置 finetuning_type: "
    "lora。",
    "lora_only_many": "{names} 是 LoRA 参数，但 finetuning_type 为 '{method}'：请删除它们，或设置 "
    "finetuning_type: lora。",
    "freeze_only_one": "{names} 是部分参数微调（freeze）的参数，但 finetuning_type 为 '{method}'：请删除它，或设置"
    " finetuning_type: freeze。",
    "freeze_only_many": "{names} 是部分参数微调（freeze）的参数，但 finetuning_type 为 '{method}'：请删除它们，或"
    "设置 finetuning_type: freeze。",
    "quantization_method": "quantization_bit {bits} 训练量化后的基座，只能配合 LoRA（QLoRA）或 OFT（QOFT）：请设置"
    " finetuning_type: lora 或 oft，或删除 quantization_bit。",
    "dora_pissa": "use_dora 与 pissa_init 不能同时使用：请只选一种 LoRA 变体。",
    "pissa_convert_needs_init": "pissa_convert 把 PiSSA 适配器转换为普通 LoRA：请设置 pissa_init: true，或删除 "
    "pissa_convert。",
    "pissa_convert_target": "pissa_convert 与 additional_target 同时设置：peft 的转换只保留 LoRA 矩阵，训练过的 "
    "{target} 会从保存的适配器中丢失；请删除 additional_target 或 pissa_convert。",
    "switch_off_one": "{names} 只在 {switch}: true 时生效：请设置 {switch}: true，或删除它。",
    "switch_off_many": "{names} 只在 {switch}: true 时生效：请设置 {switch}: true，或删除它们。",
    "oft_only_one": "{names} 是 OFT 参数，但 finetuning_type 为 '{method}'：请设置 finetuning_type: oft，或删除它。",
    "oft_only_many": "{names} 是 OFT 参数，但 finetuning_type 为 '{method}'：请设置 finetuning_type: oft，或删除它"
    "们。",
    "oft_sizes_zero": "oft_rank 与 oft_block_size 都为 0：请设置其中一个（如 oft_block_size: 32），另一个设为 0。",
    "oft_sizes_both": "oft_rank {rank} 与 oft_block_size {block} 都已设置：peft 会由其中一个推算另一个；请把另一个"
    "设为 0。",
    "part_method_ptuning": "P-Tuning v2",
    "part_method_prompt": "提示词微调",
    "part_logprobs": "序列的对数概率",
    "part_last_score": "最后一个 token 的分数",
    "part_prefix_checkpointing": "它的前缀以 KV 缓存的形式进入每一层的注意力，而 transformers 做了检查点的解码层会"
    "丢弃这份缓存（反向传播中重算的层会再次把键写入缓存），peft 也拒绝在启用检查点的模型上做前缀微调",
    "part_unfit_use_galore": "对模型权重矩阵的梯度做投影",
    "part_unfit_use_apollo": "对模型权重矩阵的梯度做缩放",
    "part_unfit_use_badam": "逐块训练解码层",
    "part_unfit_use_muon": "对解码层权重矩阵的更新做正交化",
    "prompt_only_one": "{names} 是 {name} 的参数，但 finetuning_type 为 '{method}'：请设置 finetuning_type: "
    "{wanted}，或删除它。",
    "prompt_only_many": "{names} 是 {name} 的参数，但 finetuning_type 为 '{method}'：请设置 finetuning_type: "
    "{wanted}，或删除它们。",
    "prompt_rollouts": "{stage} 阶段使用 finetuning_type {method}：{stage} 用策略模型采样 rollout{critic}，"
    "tunekit 只对权重类微调方法支持这一点（{name} 支持的阶段为 {stages}）；{stage} 请使用 finetuning_type lora。",
    "part_critic": "，并在旁边训练一个价值模型",
    "prompt_positions": "{stage} 阶段使用 finetuning_type prompt：提示词微调在每条序列前加入 num_virtual_tokens 个"
    "可训练位置，而 {stage} 在序列自身的位置上读取{reads}；请使用 finetuning_type ptuning（其前缀不增加位置）或 "
    "lora。",
    "prompt_loss_variant": "{name} 与 finetuning_type prompt 同时使用：该损失变体对每个输入位置的 logits 加权，而"
    "提示词微调在它们之前加入 num_virtual_tokens 个位置；请使用 finetuning_type ptuning 或 lora。",
    "prompt_packed_ptuning": "{option} 与 finetuning_type {method} 同时使用：{name} 为每一行只加一个前缀，而 peft "
    "无法把拼接在同一行的样本隔开（它会平移这些样本的位置编号）；请设置 {option}: false。",
    "prompt_packed_prompt": "{option} 与 finetuning_type {method} 同时使用：{name} 为每一行只加一个前缀，而 peft "
    "无法把拼接在同一行的样本隔开（它会丢弃这些样本的位置编号）；请设置 {option}: false。",
    "prompt_optimizer_ptuning": "{option} 与 finetuning_type {method} 同时使用：它会{why}，而 {name} 不训练这些权"
    "重（只训练前缀）；请删除 {option}。",
    "prompt_optimizer_prompt": "{option} 与 finetuning_type {method} 同时使用：它会{why}，而 {name} 不训练这些权重"
    "（只训练虚拟 token）；请删除 {option}。",
    "ptuning_checkpointing": "gradient_checkpointing: true 与 finetuning_type ptuning 同时使用：P-Tuning v2 训练时"
    "不使用梯度检查点（{why}）；请删除 gradient_checkpointing（ptuning 下 auto 即为关闭）或设为 false。若要减少激"
    "活值显存，请减小 per_device_train_batch_size 或 cutoff_len，或使用 finetuning_type lora。",
    "reentrant_gc_off": "use_reentrant_gc: true 选择梯度检查点的重算实现，但梯度检查点已关闭（{option}）：请删除 "
    "use_reentrant_gc，或开启梯度检查点。",
    "ptuning_checkpointing_layers": "gradient_checkpointing_layers 与 finetuning_type ptuning 同时使用：P-Tuning "
    "v2 训练时不使用梯度检查点（{why}），因此不会对任何层做检查点；请删除 gradient_checkpointing_layers。",
    "fsdp_unknown_words": "fsdp: {value} 含有未知的词 {words}：请使用 {strategies} 之一，后面可加 `offload`（例如 "
    "`fsdp: full_shard offload`）。",
    "fsdp_one_strategy": "fsdp: {value} 必须恰好指定 {strategies} 中的一个。",
    "fsdp_stage": "fsdp: {fsdp} 不支持 {stage} 阶段（模型旁保存了价值头，或训练中需要生成）；fsdp 支持的阶段为 "
    "{stages}。请删除 fsdp。",
    "fsdp_fp16": "不支持 fsdp 与 fp16 同时使用：FSDP2 保持梯度分片，fp16 的损失缩放器会在每个进程上各自决定是否跳"
    "过一步。请使用 bf16（FSDP2 以 bf16 计算，并保留 fp32 主权重），或在 fp16 下使用 deepspeed。",
    "fsdp_predict": "不支持 do_predict 与 fsdp 同时使用：用分片的模型生成需要所有进程参与。请先训练，再对保存的模"
    "型运行 `tunekit predict`。",
    "stage_needs_reward": "{stage} 阶段需要奖励：请设置 reward_funcs（package.module:function）或 reward_model（由"
    " rm 阶段保存的目录）。",
    "bf16_and_fp16": "bf16 与 fp16 同时为 true：请只选一种混合精度模式（Ampere 及更新的 GPU 用 bf16，否则用 fp16）。",
    "deepspeed_and_fsdp": "同时设置了 deepspeed 和 fsdp：请只选一种分布式引擎。",
    "mask_history_train_on_prompt": "mask_history 与 train_on_prompt 相互矛盾：mask_history 只训练最后一轮回答，"
    "train_on_prompt 训练全部内容。",
    "where_config": "配置中",
    "where_command_line": "命令行",
    "where_form": "表单中",
    "where_file": "{path} 中",
    "former_disagrees": "{former}（{value}，{where}）与 {name}（{other}）不一致：它们是同一个参数（{former} 是旧名"
    "称）；请保留 {name}。",
    "lf_unsupported": "`{option}` 是 tunekit（暂）不支持的 LLaMA-Factory 参数（{where}）：请删除它；`tunekit "
    "train --help` 列出了 tunekit 支持的参数。{why}",
    "gc_kwargs_other": "gradient_checkpointing_kwargs {value}（{where}）：tunekit 只从中读取 use_reentrant: true 或 "
    "false（即 use_reentrant_gc）；请删除其它键。",
    "lf_unsupported_n": "{options} 是 tunekit（暂）不支持的 LLaMA-Factory 参数（{where}）：请删除它们；`tunekit "
    "train --help` 列出了 tunekit 支持的参数。{why}",
    "part_why_unsupported": "（{why}。）",
    "part_why_megatron": "Megatron-Core 训练（LLaMA-Factory 的 USE_MCA=1 与 mcore_adapter，或 Megatron-Bridge）"
    "是 tunekit 没有的仅限 GPU 的引擎：多卡训练请用 deepspeed（ZeRO 0-3）或 fsdp（见 docs/workflows/multi-gpu.md）",
    "part_why_ktransformers": "KTransformers（LLaMA-Factory 的 use_kt：MoE 专家由它的 CPU/GPU 内核计算）"
    "是 tunekit 没有的仅限 GPU 的引擎：MoE 模型的 LoRA 通过 transformers 与 peft 训练（见 docs/moe.md）",
    "part_why_ray_storage_filesystem": "Ray 的云存储：tunekit 自己把检查点、日志和模型写到 output_dir，Ray 只在 "
    "ray_storage_path（本地或共享目录）中保存它的运行记录",
    "part_why_mixture_of_depths": "深度混合（`mixture_of_depths`）需要 `mixture-of-depth` 包（LLaMA-Factory 要求 "
    ">=1.1.6），而它的最新版本 1.2.0 导入了 transformers 5 已删除的内容（TRANSFORMERS_CACHE、"
    "transformers.modeling_attn_mask_utils）",
    "unknown_option": "未知参数 {shown}（{where}）。{tail}",
    "part_did_you_mean": "你是不是想写：{names}？",
    "part_see_help": "可用参数见 `tunekit train --help`。",
    "bool_for_number": "参数 '{option}'（{where}）的值为 {value}，应为 {expected}。",
    "bool_for_number_cli": "参数 '{option}'（{where}）的值为 {value}，应为 {expected}：`--{option}` 需要一个值（"
    "`--{option} VALUE` 或 {option}=VALUE）；不带值的开关表示 true，只有 true/false 类参数才能这样写。",
    "option_invalid": "参数 '{option}'（{where}）的值 {given}（{type}）无效，应为 {expected}：{detail}。",
    "type_float": "数字（`float`）",
    "type_int": "整数（`int`）",
    "type_bool": "true 或 false（`bool`）",
    "type_str": "文本（`str`）",
    "pydantic_other": "{msg}",
    "pydantic_greater_than": "必须大于 {gt}",
    "pydantic_greater_than_equal": "必须大于或等于 {ge}",
    "pydantic_less_than": "必须小于 {lt}",
    "pydantic_less_than_equal": "必须小于或等于 {le}",
    "pydantic_multiple_of": "必须是 {multiple_of} 的倍数",
    "pydantic_literal_error": "必须是 {choices}",
    "pydantic_int_parsing": "必须是整数，无法把该文本解析为整数",
    "pydantic_int_from_float": "必须是整数，不能带小数部分",
    "pydantic_int_type": "必须是整数",
    "pydantic_float_parsing": "必须是数字，无法把该文本解析为数字",
    "pydantic_float_type": "必须是数字",
    "pydantic_bool_parsing": "必须是布尔值（true 或 false），无法识别该输入",
    "pydantic_bool_type": "必须是布尔值（true 或 false）",
    "pydantic_string_type": "必须是文本",
    "pydantic_dict_type": "必须是映射（字典）",
    "pydantic_list_type": "必须是列表",
    "pydantic_missing": "缺少必填项",
    "pydantic_extra_forbidden": "不允许额外的字段",
    "pydantic_finite_number": "必须是有限数（`inf` 或 `nan` 会让损失和所有权重变成 NaN）",
    "number_not_finite": "{where}{value} 不是有限数：学习率、系数或大小为 `inf` 或 `nan` 会让损失和所有权重变成 "
    "NaN；请填写有限的值",
    "number_too_large": "{where}{value} 超出 64 位整数范围（最大 {limit}），而 torch 和数据加载器用它计数；请填写"
    "合理的值",
    "json_invalid": "{option}：{path} 不是有效的 JSON（{error}）。",
    "json_not_utf8": "{option}：{path} 不是 UTF-8 文本（第 {byte} 个字节）；它必须是 JSON 文件。",
    "json_not_object": "{option}：{path} 必须是一个 JSON 对象，实际为 `{kind}`。",
    "ds_unknown_preset": "未知的 DeepSpeed 预设 {name}：请使用 {presets} 之一，或 JSON 文件的路径。",
    "ds_not_found": "deepspeed：{value} 既不是预设{hint}，也不是已存在的 JSON 文件。",
    "part_ds_preset_hint": "（预设名：{presets}）",
    "ds_zero_not_object": "deepspeed：{source} 中的 'zero_optimization' 必须是一个对象。",
    "ds_stage": "deepspeed：{source} 中的 zero_optimization.stage 必须是 0、1、2 或 3，实际为 {stage}。",
    "ds_batch_field": 'deepspeed：{source} 中的 {key} 必须是正整数或 "auto"，实际为 {value}。',
    "ds_contradicts": "deepspeed：{source} 与 tunekit 的参数有 {count} 处矛盾：{conflicts}。请把这些字段都设为 "
    '"auto"（推荐：由 tunekit 的参数填写），或让两边一致。',
    "part_ds_numbered": "（{n}）{text}",
    "part_ds_micro": "train_micro_batch_size_per_gpu 为 {micro}，而 per_device_train_batch_size 为 {micro_batch}",
    "part_ds_accum": "gradient_accumulation_steps 为 {accum}，而 tunekit 的 gradient_accumulation_steps 为 "
    "{accumulation}",
    "part_ds_total": "train_batch_size {total} 不等于 per_device_train_batch_size x gradient_accumulation_steps x "
    "进程总数 = {micro} x {accum} x {world} = {product}（或改用 {fix}）",
    "part_ds_fix_accum": "gradient_accumulation_steps: {per_rank}",
    "part_ds_fix_divisible": "能被 per_device_train_batch_size x 进程总数（{micro} x {world}）整除的 train_batch_size",
    "part_ds_field": "{key} 为 {given}，而 {option} 为 {mine}",
    "part_ds_autotp": "tensor_parallel.autotp_size 为 {tp}，但本次运行有 {world} 个进程：AutoTP 把每一层切分到 {tp} "
    "个进程上（请把 NPROC_PER_NODE 设为 {tp} 的倍数，或删除 tensor_parallel 块）",
    "part_ds_optimizer": "它的 `optimizer` 块会代替 {optimizers} 运行（删除该块即可使用 {first}）",
    "dataset_twice": "{option}：'{name}' 被选了两次，训练会把它的样本读两遍：每个数据集只选一次。",
    "path_what_config_file": "配置文件",
    "board_config_name": "配置文件：请填写文件名，例如 configs/run.yaml。",
    "board_config_suffix": "{what} '{value}' 被拒绝：面板只{verb} .yaml、.yml 或 .json 文件。",
    "part_board_saves": "保存",
    "part_board_loads": "加载",
    "board_config_exists": "配置文件 {path} 已存在：勾选“覆盖已有文件”以替换它，或换一个文件名。",
    "board_config_folder": "配置文件 {path} 是一个目录，不是文件：请换一个文件名。",
    "board_config_missing": "配置文件 '{path}' 不存在。",
    "board_config_too_large": "配置文件 {path} 超过 {limit} kB：不是配置文件。",
    "board_config_bad_json": "{path} 不是有效的 JSON（第 {line} 行，第 {column} 列）。",
    "board_config_bad_yaml": "{path} 不是有效的 YAML{where}。",
    "part_board_line_column": "（第 {line} 行，第 {column} 列）",
    "board_config_not_mapping": "{path} 必须是“参数: 值”的映射，实际为 `{kind}`。",
    "board_config_unknown": "{path}：{count} 个未知参数：{names}{more}。可用参数见 `tunekit train --help`。",
    "part_board_more": " ...",
    "path_what_option": "参数 '{option}'",
    "path_what_dataset": "参数 '{option}' 的数据集 '{name}'",
    "path_what_key": "{what} 的 {key}",
    "path_hidden": "{what} '{value}' 被拒绝：面板不读写隐藏的文件或目录（'{hidden}'）。请使用不含以 '.' 开头部分的"
    "路径。",
    "path_outside": "{what} '{value}' 不在面板可访问的目录内（{roots}）。请使用这些目录内的路径，或用 "
    "`--allow-path DIR`（或 `--workspace DIR`）重新启动面板。",
    "path_remote_code": "参数 '{option}' 会运行表单中指定的代码，因此面板拒绝它；请用 `--allow-remote-code` 重新启"
    "动面板以允许它，或在终端中运行 `tunekit train`。",
    "path_dataset_info": "{what}：{error}",
    "path_hub": "{what} 的 {key} '{value}' {problem}：面板只按 ID 读取 Hugging Face 上的数据集。请在工作目录内用 "
    "file_name 登记本地文件。",
    "path_cloud": "{what} 的 {key} 被拒绝：面板不读取云端文件。请把文件下载到工作目录内，并用 file_name 登记。",
    "board_job_running": "面板上已有任务在运行：请先停止它，或等它结束",
    "ray_gpu_with_use_cpu": "resources_per_worker 向 Ray 申请了 GPU，但 use_cpu 为 true：请从 resources_per_worker "
    "中删除 GPU，或把 use_cpu 设为 false。",
}
ZH: dict[str, str] = merged(
    _CONFIG_ZH, ZH_V1, ZH_PLAN, RUNGS_ZH, ZH_INFER, ZH_PREDICT, ZH_API, ZH_RUN, ZH_ENV, ZH_DATA, ZH_EXPORT
)

# placeholder → how a tuple of values is joined in Chinese (the same placeholders as problem_texts.JOINS)
JOINS_ZH: dict[str, str | tuple[str, str]] = {
    "options": ("、", " 和 "),
    "roots": "、",
    "names": "、",
    "trackers": "、",
    "known": "、",
    "custom": " 和 ",
    "wrong": "、",
    "allowed": "、",
    "words": "、",
    "strategies": "、",
    "stages": ("、", " 和 "),
    "choices": ("、", " 或 "),
    "presets": "、",
    "conflicts": "；",
    "optimizers": "、",
    **JOINS_ZH_V1,
    **JOINS_ZH_PLAN,
    **JOINS_ZH_INFER,
    **JOINS_ZH_EXPORT,
    **JOINS_ZH_RUN,
}


def say(text: str, lang: str) -> str:
    """``text`` (a problem's message) in ``lang``: English as it is, Chinese from its key and values."""
    if lang != "zh" or not isinstance(text, Keyed) or text.key not in ENGLISH:
        return str(text)
    return render(text.to_json(), _template, _join)


def say_error(exc: BaseException, lang: str) -> str:
    """A refused action's message in ``lang``: English as it is (``str(exc)``); in Chinese its keyed problems (or its
    keyed message) said again, one a line; a message made as plain text is shown as it is."""
    problems = getattr(exc, "problems", ())
    if lang != "zh":
        return str(exc)
    if problems:
        return "\n".join(dict.fromkeys(say(p.message, lang) for p in problems))
    first = exc.args[0] if exc.args else ""
    return say(first, lang) if isinstance(first, Keyed) else str(exc)


def say_job_error(path: str | Path, lang: str) -> str:
    """A failed job's keyed error (the JSON list of messages its ``tunekit`` wrote: ``cli/verbs.py``) in Chinese, one a
    line; "" in English (the job's log says it) and when the job wrote none (a message made as plain text)."""
    if lang != "zh":
        return ""
    try:
        messages = json.loads(Path(path).read_text(encoding="utf-8"))
        return "\n".join(dict.fromkeys(render(m, _template, _join) for m in messages))
    except (OSError, ValueError, LookupError, TypeError, AttributeError):  # none, or a job of another tunekit
        return ""


def _template(key: str) -> str:
    return ZH.get(key) or ENGLISH[key]


def _join(name: str) -> str | tuple[str, str]:
    return JOINS_ZH.get(name) or JOINS[name]
