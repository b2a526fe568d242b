"""Option labels in people's words, English and Chinese (LLaMA Board's words where it has the option).

A label names what an option does; the option name itself is shown small beside it (in the help line), so a YAML
user can map the field. One entry per option, like ``config/help_zh.py``: ``tests/webui/test_webui_groups.py`` fails,
naming the option, when an option has no words here (a board without them would label it with its name).
"""

from __future__ import annotations

# option name -> (English, Chinese)
LABELS: dict[str, tuple[str, str]] = {
    # base model
    "model_name_or_path": ("Model path or hub id", "模型路径或仓库 ID"),
    "adapter_name_or_path": ("Adapter path (optional)", "适配器路径（非必填）"),
    "template": ("Chat template", "对话模板"),
    # data
    "dataset_dir": ("Data folder", "数据路径"),
    "dataset": ("Dataset", "数据集"),
    "eval_dataset": ("Evaluation dataset (optional)", "评估数据集（非必填）"),
    # stage and method
    "stage": ("Stage", "训练阶段"),
    "finetuning_type": ("Finetuning method", "微调方法"),
    "use_galore": ("Use GaLore", "使用 GaLore"),
    "use_apollo": ("Use APOLLO", "使用 APOLLO"),
    "use_badam": ("Use BAdam", "使用 BAdam"),
    # quantization
    "quantization_bit": ("Quantization bit", "量化等级"),
    "quantization_method": ("Quantization method", "量化方法"),
    "quantization_type": ("4-bit data type", "4 比特数据类型"),
    "double_quantization": ("Double quantization", "双重量化"),
    # acceleration
    "flash_attn": ("Attention implementation", "注意力实现"),
    "enable_liger_kernel": ("Liger kernels", "使用 Liger 算子"),
    "use_unsloth": ("Use Unsloth", "使用 Unsloth"),
    "use_v1_kernels": ("LLaMA-Factory v1 kernels", "LLaMA-Factory v1 算子"),
    "moe_aux_loss_coef": ("MoE router aux loss coefficient", "MoE 路由辅助损失系数"),
    "gradient_checkpointing": ("Gradient checkpointing", "梯度检查点"),
    "torch_compile": ("Compile the model", "编译模型"),
    # RoPE
    "rope_scaling": ("RoPE scaling", "RoPE 插值方法"),
    "rope_scaling_target_len": ("RoPE target length", "RoPE 目标长度"),
    # general
    "learning_rate": ("Learning rate", "学习率"),
    "num_train_epochs": ("Epochs", "训练轮数"),
    "max_steps": ("Max steps (overrides epochs)", "最大步数（优先于训练轮数）"),
    "per_device_train_batch_size": ("Batch size per device", "批处理大小（每设备）"),
    "gradient_accumulation_steps": ("Gradient accumulation", "梯度累积"),
    "cutoff_len": ("Cutoff length", "截断长度"),
    "max_samples": ("Max samples", "最大样本数"),
    "val_size": ("Validation size", "验证集比例"),
    "lr_scheduler_type": ("Learning-rate scheduler", "学习率调节器"),
    "max_grad_norm": ("Max gradient norm", "最大梯度范数"),
    "seed": ("Seed", "随机种子"),
    "bf16": ("Compute in bf16", "使用 bf16 计算"),
    "fp16": ("Compute in fp16", "使用 fp16 计算"),
    # other
    "logging_steps": ("Logging interval (steps)", "日志间隔（步）"),
    "save_steps": ("Save interval (steps)", "保存间隔（步）"),
    "warmup_steps": ("Warm-up steps", "预热步数"),
    "neftune_noise_alpha": ("NEFTune alpha", "NEFTune 噪声参数"),
    "packing": ("Pack sequences", "序列打包"),
    "neat_packing": ("Neat packing", "使用无污染打包"),
    "train_on_prompt": ("Train on prompt", "学习提示词"),
    "mask_history": ("Mask history", "不学习历史对话"),
    "resize_vocab": ("Resize token embeddings", "更改词表大小"),
    "use_llama_pro": ("Enable LLaMA Pro", "使用 LLaMA Pro"),
    "enable_thinking": ("Enable thinking", "启用思考模式"),
    "preserve_thinking": ("Keep earlier thoughts", "保留历史思考"),
    "thought_loss_weight": ("Thought loss weight", "思考部分的损失权重"),
    "report_to": ("External loggers", "外部记录面板"),
    "plot_loss": ("Plot the loss", "绘制损失曲线"),
    "run_name": ("Run name", "运行名称"),
    # freeze
    "freeze_trainable_layers": ("Trainable layers", "可训练层数"),
    "freeze_trainable_modules": ("Trainable modules", "可训练模块"),
    "freeze_extra_modules": ("Extra modules (optional)", "额外模块（非必填）"),
    # LoRA
    "lora_rank": ("LoRA rank", "LoRA 秩"),
    "lora_alpha": ("LoRA alpha", "LoRA 缩放系数"),
    "lora_dropout": ("LoRA dropout", "LoRA 随机丢弃"),
    "loraplus_lr_ratio": ("LoRA+ learning-rate ratio", "LoRA+ 学习率比例"),
    "create_new_adapter": ("Create new adapter", "新建适配器"),
    "use_rslora": ("Use rsLoRA", "使用 rsLoRA"),
    "use_dora": ("Use DoRA", "使用 DoRA"),
    "pissa_init": ("Use PiSSA", "使用 PiSSA"),
    "lora_target": ("LoRA modules", "LoRA 作用模块"),
    "additional_target": ("Additional modules (optional)", "附加模块（非必填）"),
    # RLHF
    "pref_beta": ("Beta value", "Beta 参数"),
    "pref_ftx": ("SFT loss weight (ftx)", "SFT 损失权重（ftx）"),
    "pref_loss": ("Loss type", "损失类型"),
    "ref_model": ("Reference model (optional)", "参考模型（非必填）"),
    "reward_model": ("Reward model", "奖励模型"),
    "num_generations": ("Generations per prompt", "每个提示的生成数"),
    "ppo_score_norm": ("Score norm", "归一化分数"),
    "ppo_whiten_rewards": ("Whiten rewards", "白化奖励"),
    # multimodal
    "freeze_vision_tower": ("Freeze vision tower", "冻结视觉编码器"),
    "freeze_multi_modal_projector": ("Freeze multi-modal projector", "冻结多模态投影器"),
    "freeze_language_model": ("Freeze language model", "冻结语言模型"),
    "image_max_pixels": ("Image max pixels", "图像最大像素"),
    "image_min_pixels": ("Image min pixels", "图像最小像素"),
    "video_max_pixels": ("Video max pixels", "视频最大像素"),
    "video_min_pixels": ("Video min pixels", "视频最小像素"),
    # GaLore, APOLLO, BAdam
    "galore_rank": ("GaLore rank", "GaLore 秩"),
    "galore_update_interval": ("Update interval", "更新间隔"),
    "galore_scale": ("GaLore scale", "GaLore 缩放系数"),
    "galore_target": ("GaLore modules", "GaLore 作用模块"),
    "apollo_rank": ("APOLLO rank", "APOLLO 秩"),
    "apollo_update_interval": ("Update interval", "更新间隔"),
    "apollo_scale": ("APOLLO scale", "APOLLO 缩放系数"),
    "apollo_target": ("APOLLO modules", "APOLLO 作用模块"),
    "badam_mode": ("BAdam mode", "BAdam 模式"),
    "badam_switch_mode": ("Switch mode", "切换策略"),
    "badam_switch_interval": ("Switch interval", "切换频率"),
    "badam_update_ratio": ("Update ratio", "块更新比例"),
    # output
    "output_dir": ("Output folder", "输出目录"),
    "deepspeed": ("DeepSpeed stage", "DeepSpeed 阶段"),
    # trackers
    "use_swanlab": ("Use SwanLab", "使用 SwanLab"),
    "swanlab_project": ("SwanLab project", "SwanLab 项目名"),
    "swanlab_run_name": ("SwanLab experiment name (optional)", "SwanLab 实验名（非必填）"),
    "swanlab_workspace": ("SwanLab workspace (optional)", "SwanLab 工作区（非必填）"),
    "swanlab_api_key": ("SwanLab API key (optional)", "SwanLab API 密钥（非必填）"),
    "swanlab_mode": ("SwanLab mode", "SwanLab 模式"),
    "swanlab_logdir": ("SwanLab log folder", "SwanLab 日志目录"),
    # ---- the rest: under "Advanced" and on the Chat and Export tabs
    # model
    "cache_dir": ("Download cache folder", "下载缓存目录"),
    "model_revision": ("Model revision", "模型版本"),
    "trust_remote_code": ("Trust remote code", "信任远程代码"),
    "use_fast_tokenizer": ("Fast tokenizer", "使用快速分词器"),
    "split_special_tokens": ("Split special tokens", "拆分特殊 token"),
    "add_special_tokens": ("Add special tokens", "添加特殊 token"),
    "dtype": ("Weight data type", "权重数据类型"),
    "gradient_checkpointing_layers": ("Checkpointed layers", "检查点层数"),
    "use_reentrant_gc": ("Reentrant checkpointing", "可重入检查点"),
    "elementwise_recompute": ("Recompute element-wise layers", "重算逐元素层"),
    "disable_gradient_checkpointing": ("Disable gradient checkpointing", "关闭梯度检查点"),
    "low_cpu_mem_usage": ("Low CPU memory usage", "低内存加载"),
    "allow_new_weights": ("Allow new weights", "允许新增权重"),
    "print_param_status": ("Print parameter status", "打印参数状态"),
    # data
    "mix_strategy": ("Dataset mixing", "数据集混合方式"),
    "interleave_probs": ("Interleave probabilities", "交错采样概率"),
    "dataset_sampling": ("Samples drawn per dataset", "各数据集抽样"),
    "preprocessing_num_workers": ("Tokenization processes", "分词进程数"),
    "preprocessing_batch_size": ("Tokenization batch size", "分词批大小"),
    "overwrite_cache": ("Tokenize again", "重新分词"),
    "tokenized_path": ("Tokenized data folder", "分词结果目录"),
    "padding_free": ("Padding-free batches", "无填充批次"),
    "max_tokens_per_batch": ("Max tokens per batch", "每批最大 token 数"),
    "batching_strategy": ("Batching strategy", "组批策略"),
    "default_system": ("Default system prompt", "默认系统提示词"),
    "tool_format": ("Tool-call format", "工具调用格式"),
    "empty_template_eos": ("End replies with EOS (empty template)", "回复以 EOS 结尾（空模板）"),
    "bad_records": ("Invalid records", "无效记录处理"),
    "ignore_pad_token_for_loss": ("Ignore padding in the loss", "损失忽略填充"),
    "pad_to_multiple_of": ("Pad to a multiple of", "填充到倍数"),
    "group_by_length": ("Group by length", "按长度分组"),
    "group_within_step": ("Group within a step", "步内分组"),
    # stage and method
    "do_train": ("Train", "训练"),
    "do_eval": ("Evaluate", "评估"),
    "do_predict": ("Predict", "预测"),
    "pissa_iter": ("PiSSA iterations", "PiSSA 迭代次数"),
    "pissa_convert": ("Convert PiSSA to LoRA", "PiSSA 转换为 LoRA"),
    # training
    "per_device_eval_batch_size": ("Evaluation batch size per device", "评估批处理大小（每设备）"),
    "lr_scheduler_kwargs": ("Scheduler arguments", "学习率调节器参数"),
    "warmup_ratio": ("Warm-up ratio", "预热比例"),
    "optim": ("Optimizer", "优化器"),
    "weight_decay": ("Weight decay", "权重衰减"),
    "adam_beta1": ("Adam beta1", "Adam beta1"),
    "adam_beta2": ("Adam beta2", "Adam beta2"),
    "adam_epsilon": ("Adam epsilon", "Adam epsilon"),
    "data_seed": ("Data seed", "数据随机种子"),
    "tf32": ("Allow TF32", "允许 TF32"),
    "use_cpu": ("Train on the CPU", "在 CPU 上训练"),
    "dataloader_num_workers": ("Data loader processes", "数据加载进程数"),
    "dataloader_pin_memory": ("Pin data loader memory", "锁页内存"),
    "ddp_timeout": ("Distributed timeout (s)", "分布式超时（秒）"),
    "include_num_input_tokens_seen": ("Count input tokens", "统计输入 token 数"),
    "eval_strategy": ("Evaluation schedule", "评估策略"),
    "eval_steps": ("Evaluation interval (steps)", "评估间隔（步）"),
    "overwrite_output_dir": ("Overwrite the output folder", "覆盖输出目录"),
    "save_strategy": ("Save schedule", "保存策略"),
    "save_total_limit": ("Checkpoints kept", "保留的检查点数"),
    "save_only_model": ("Save the model only", "只保存模型"),
    "resume_from_checkpoint": ("Resume from checkpoint", "从检查点恢复"),
    "load_best_model_at_end": ("Load the best model at the end", "结束时加载最佳模型"),
    "metric_for_best_model": ("Metric of the best model", "最佳模型指标"),
    "trained_tokens_loss": ("Loss over trained tokens only", "只在训练 token 上算损失"),
    "chunked_lm_loss": ("Chunked LM-head loss", "分块计算 LM 头损失"),
    "auto_fit": ("Auto-fit to the GPU", "自动适配显存"),
    # RLHF
    "dpo_label_smoothing": ("DPO label smoothing", "DPO 标签平滑"),
    "simpo_gamma": ("SimPO reward margin", "SimPO 奖励间隔"),
    "kto_chosen_weight": ("KTO desirable weight", "KTO 正例权重"),
    "kto_rejected_weight": ("KTO undesirable weight", "KTO 负例权重"),
    "ref_model_adapters": ("Reference model adapters", "参考模型适配器"),
    "precompute_ref_log_probs": ("Precompute reference log-probs", "预先计算参考模型对数概率"),
    "reward_model_adapters": ("Reward model adapters", "奖励模型适配器"),
    "reward_model_type": ("Reward model type", "奖励模型类型"),
    "reward_funcs": ("Reward functions", "奖励函数"),
    "ppo_epochs": ("PPO epochs", "PPO 轮数"),
    "ppo_buffer_size": ("PPO buffer size", "PPO 缓冲区大小"),
    "ppo_target": ("PPO KL target", "PPO KL 目标"),
    "cliprange": ("Policy clip range", "策略裁剪范围"),
    "cliprange_value": ("Value clip range", "价值裁剪范围"),
    "gamma": ("Discount (gamma)", "折扣因子（gamma）"),
    "lam": ("GAE lambda", "GAE lambda"),
    "vf_coef": ("Value loss weight", "价值损失权重"),
    "grpo_beta": ("GRPO KL weight", "GRPO KL 权重"),
    "grpo_iterations": ("GRPO iterations", "GRPO 迭代次数"),
    "ppo_kl_coef": ("PPO KL weight", "PPO KL 权重"),
    "ppo_adaptive_kl": ("Adaptive KL", "自适应 KL"),
    "rollout_temperature": ("Rollout temperature", "rollout 采样温度"),
    "generation_max_new_tokens": ("Rollout length (tokens)", "rollout 生成长度（token）"),
    # optimizers and extra methods
    "galore_proj_type": ("GaLore projection side", "GaLore 投影方向"),
    "galore_layerwise": ("GaLore layer-wise", "GaLore 逐层更新"),
    "apollo_proj": ("APOLLO projection", "APOLLO 投影方式"),
    "apollo_proj_type": ("APOLLO projection side", "APOLLO 投影方向"),
    "apollo_scale_type": ("APOLLO scale type", "APOLLO 缩放类型"),
    "apollo_layerwise": ("APOLLO layer-wise", "APOLLO 逐层更新"),
    "apollo_scale_front": ("APOLLO limiter first", "APOLLO 先限幅"),
    "badam_start_block": ("BAdam first block", "BAdam 起始块"),
    "badam_mask_mode": ("BAdam mask mode", "BAdam 掩码模式"),
    "badam_verbose": ("BAdam verbosity", "BAdam 日志级别"),
    "use_muon": ("Use Muon", "使用 Muon"),
    "use_adam_mini": ("Use Adam-mini", "使用 Adam-mini"),
    "oft_rank": ("OFT rank", "OFT 秩"),
    "oft_block_size": ("OFT block size", "OFT 块大小"),
    "oft_target": ("OFT modules", "OFT 作用模块"),
    "module_dropout": ("OFT module dropout", "OFT 模块丢弃"),
    "pre_seq_len": ("P-Tuning prefix length", "前缀长度"),
    "prefix_projection": ("Prefix projection MLP", "前缀投影 MLP"),
    "prefix_hidden_size": ("Prefix MLP width", "前缀 MLP 宽度"),
    "num_virtual_tokens": ("Virtual tokens", "虚拟词元数"),
    "pure_bf16": ("Pure bf16", "纯 bf16 训练"),
    "fp8": ("FP8 training", "FP8 训练"),
    "fp8_backend": ("FP8 backend", "FP8 后端"),
    "fp8_enable_fsdp_float8_all_gather": ("FP8 all-gather (FSDP2)", "FP8 all-gather（FSDP2）"),
    "use_dft_loss": ("DFT loss", "DFT 损失"),
    "use_eaft_loss": ("EAFT loss", "EAFT 损失"),
    "eaft_alpha": ("EAFT exponent", "EAFT 指数"),
    "use_asft_loss": ("ASFT loss", "ASFT 损失"),
    "asft_alpha": ("ASFT KL weight", "ASFT KL 权重"),
    # distributed
    "fsdp": ("FSDP sharding", "FSDP 分片"),
    "fsdp_config": ("FSDP config file", "FSDP 配置文件"),
    "fsdp_transformer_layer_cls_to_wrap": ("FSDP unit classes", "FSDP 分片单元类"),
    "ddp_find_unused_parameters": ("DDP: find unused parameters", "DDP：查找未使用的参数"),
    "ddp_backend": ("Distributed backend", "分布式后端"),
    "ray_num_workers": ("Ray workers", "Ray 工作进程数"),
    "resources_per_worker": ("Ray resources per worker", "每个 Ray 工作进程的资源"),
    "placement_strategy": ("Ray placement strategy", "Ray 放置策略"),
    "ray_run_name": ("Ray run name", "Ray 运行名称"),
    "ray_storage_path": ("Ray storage folder", "Ray 存储目录"),
    "ray_init_kwargs": ("Ray init arguments", "Ray 初始化参数"),
    # logging
    "logging_first_step": ("Log the first step", "记录第一步"),
    "disable_tqdm": ("Hide the progress bar", "隐藏进度条"),
    # multimodal
    "video_fps": ("Video frames per second", "视频每秒帧数"),
    "video_maxlen": ("Video max frames", "视频最大帧数"),
    "audio_sampling_rate": ("Audio sampling rate", "音频采样率"),
    "use_audio_in_video": ("Use the audio of videos", "使用视频中的音频"),
    "media_dir": ("Media folder", "媒体目录"),
    # export
    "export_dir": ("Export folder", "导出目录"),
    "export_size": ("Max shard size (GB)", "最大分块大小（GB）"),
    "export_device": ("Export device", "导出设备"),
    "export_legacy_format": ("Export legacy format", "导出旧格式"),
    "export_quantization_bit": ("Export quantization bit", "导出量化等级"),
    "export_quantization_dataset": ("Calibration dataset", "校准数据集"),
    "export_quantization_nsamples": ("Calibration samples", "校准样本数"),
    "export_quantization_maxlen": ("Calibration length", "校准样本长度"),
    "export_hub_model_id": ("Hub repository id (optional)", "模型仓库 ID（非必填）"),
    "export_quantization_method": ("Export quantization method", "导出量化方法"),
    "export_verify": ("Verify after export", "导出后校验"),
    "export_format": ("Export format", "导出格式"),
    "export_gguf_type": ("GGUF type", "GGUF 类型"),
    # generation (Chat, Evaluate & predict) and the API server
    "infer_backend": ("Inference engine", "推理引擎"),
    "infer_dtype": ("Inference data type", "推理数据类型"),
    "do_sample": ("Sample", "采样"),
    "temperature": ("Temperature", "温度系数"),
    "top_p": ("Top-p", "Top-p 采样值"),
    "top_k": ("Top-k", "Top-k 采样值"),
    "num_beams": ("Beams", "束搜索宽度"),
    "max_new_tokens": ("Maximum new tokens", "最大生成长度"),
    "repetition_penalty": ("Repetition penalty", "重复惩罚"),
    "length_penalty": ("Length penalty", "长度惩罚"),
    "predict_with_generate": ("Predict by generating", "生成式预测"),
    "generation_seed": ("Generation seed", "生成随机种子"),
    "api_max_tokens": ("API: max tokens per request", "API：单个请求最大 token 数"),
    "api_queue_timeout": ("API: queue timeout (s)", "API：排队超时（秒）"),
    "api_max_queue": ("API: max queued requests", "API：最大排队请求数"),
    "api_stream_timeout": ("API: stream timeout (s)", "API：流式超时（秒）"),
    "api_parse_special_tokens": ("API: parse special tokens", "API：解析特殊 token"),
    "api_media_dir": ("API: media folder", "API：媒体目录"),
    "api_max_media_mb": ("API: max media size (MB)", "API：媒体最大大小（MB）"),
}

# Words of the board's own choices: the DeepSpeed presets (groups.DEEPSPEED_CHOICES) and a dropdown's unset entry.
CHOICE_WORDS: dict[str, dict[str, tuple[str, str]]] = {
    "deepspeed": {
        "": ("none", "不使用"),
        "z2": ("stage 2", "阶段 2"),
        "z3": ("stage 3", "阶段 3"),
        "z2_offload": ("stage 2 + offload to CPU", "阶段 2 + 卸载到 CPU"),
        "z3_offload": ("stage 3 + offload to CPU", "阶段 3 + 卸载到 CPU"),
    },
}
UNSET_WORDS: dict[str, tuple[str, str]] = {"tristate": ("(auto)", "（自动）"), "choice": ("(none)", "（无）")}


def _pick(pair: tuple[str, str], lang: str) -> str:
    return pair[1] if lang == "zh" else pair[0]


def has_label(name: str) -> bool:
    return name in LABELS


def option_label(name: str, lang: str) -> str:
    """The option's label in ``lang``; its name when it has none."""
    pair = LABELS.get(name)
    return _pick(pair, lang) if pair else name


def choice_word(name: str, value: str, lang: str) -> str | None:
    """The word the board shows for ``value`` of option ``name`` (None: the value itself is shown)."""
    pair = CHOICE_WORDS.get(name, {}).get(value)
    return _pick(pair, lang) if pair else None


def unset_word(kind: str, lang: str) -> str:
    return _pick(UNSET_WORDS[kind], lang)
