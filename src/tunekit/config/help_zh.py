"""Chinese help text of every option, keyed by option name (the English help is the field's ``description``).

One table for the whole schema: the board (``webui``) shows it in Chinese mode, and
``tests/config/test_help_zh.py`` fails, naming the options, when an option has no entry here.
"""

from __future__ import annotations

HELP_ZH: dict[str, str] = {
    # ---- model
    "model_name_or_path": "本地模型目录或模型仓库 ID。",
    "adapter_name_or_path": "LoRA 适配器目录，多个用逗号分隔。",
    "cache_dir": "从模型仓库下载的文件缓存目录（默认：Hugging Face 缓存）。",
    "model_revision": "模型在仓库中的版本（分支、标签或提交）。",
    "trust_remote_code": "运行模型目录自带的建模代码；仅在信任来源时开启。",
    "use_fast_tokenizer": "使用快速（Rust）分词器。",
    "split_special_tokens": "把数据中的特殊 token 字符串当作普通文本分词。",
    "resize_vocab": "把词嵌入大小调整为分词器的词表大小。",
    "add_tokens": "要加入分词器的（非特殊）token，逗号分隔；它们的词嵌入行按 init_special_tokens 的 noise_init "
    "初始化。",
    "add_special_tokens": "要加入分词器的特殊 token，逗号分隔；分词器超出词嵌入行数时会调整词嵌入大小，每个新 token "
    "的嵌入行按 init_special_tokens 初始化。",
    "new_special_tokens_config": "每行 `token: description` 的 YAML 文件（LLaMA-Factory 的格式）："
    "其中的 token 作为特殊 token 加入（代替 add_special_tokens），init_special_tokens 为 desc_init 时"
    "用描述初始化各自的嵌入。",
    "init_special_tokens": "新增特殊 token 的嵌入行如何初始化：noise_init = 词表各行的均值"
    "加标准差为隐藏维度平方根之倒数的高斯噪声；desc_init = 描述中各 token 嵌入行的均值"
    "（需要 new_special_tokens_config）；desc_init_w_noise = 再加同样的噪声。"
    "未绑定的输出嵌入（lm_head）用它自己的行做同样的初始化。",
    "dtype": "加载权重的数据类型：auto = bf16: true 时为 bfloat16，fp16: true 时为 float16，否则 "
    "float32（未设置任何精度选项时由设备决定 bf16/fp16，开始时打印并记入 tunekit_config.yaml）；float32 "
    "在任何设备上都保持 fp32。",
    "flash_attn": "注意力实现：auto = transformers 的默认（模型支持时用 sdpa，否则 eager，如 `gpt-oss`）；"
    "fa2 = FlashAttention-2（需要 flash-attn 包和 GPU）；disabled/eager = 普通实现。",
    "rope_scaling": "RoPE 缩放以扩展上下文长度；缩放系数由 rope_scaling_target_len（或 cutoff_len）决定。",
    "rope_scaling_target_len": "rope_scaling 要达到的上下文长度（默认：cutoff_len）。",
    "gradient_checkpointing": "反向传播时重算激活以节省显存（约慢 25%）；auto = 数据分词后按最长训练样本做显存规划，"
    "放不下时开启（决定会打印出来）。",
    "disable_gradient_checkpointing": "LLaMA-Factory 的写法，等同于 gradient_checkpointing: false。",
    "enable_liger_kernel": "使用 Liger 融合算子（RMSNorm、SwiGLU、融合线性交叉熵）；需要 liger-kernel 和 GPU。",
    "use_unsloth": "使用 Unsloth 改写的模型（需要 unsloth 和 GPU）。",
    "use_v1_kernels": "LLaMA-Factory 的 v1 融合算子开关（Ascend NPU 的 RMSNorm、RoPE、SwiGLU、MoE）："
    "为加载其配置接受 false；true 会被拒绝：GPU 上的融合算子请用 enable_liger_kernel，另可用 flash_attn: fa2。",
    "quantization_bit": "以 4 或 8 比特量化加载基座模型（QLoRA，需要 lora）。",
    "quantization_method": "quantization_bit 使用的量化库。",
    "quantization_type": "bitsandbytes 的 4 比特数据类型。",
    "double_quantization": "对 4 比特的缩放系数再量化一次（bitsandbytes）。",
    "low_cpu_mem_usage": "加载权重时不在内存中保留随机初始化的副本。",
    "allow_new_weights": "允许加载权重与 config.json 的架构不完全对应的模型目录：缺少的权重随机初始化，"
    "多余的权重被丢弃（用于有意扩展的模型）。关闭时此类目录会被拒绝，并列出相应的键。",
    "moe_aux_loss_coef": "混合专家模型：路由器负载均衡（辅助）损失的权重，按 transformers 的算法加到每次前向的损失上"
    "（设置模型的 router_aux_loss_coef 与 output_router_logits），并记录为 moe/aux_loss；留空则不加。"
    "仅用于 sft 和 pt 阶段；稠密模型会被拒绝。",
    "print_param_status": "设置完成后打印每个参数的名称、形状、数据类型和是否可训练。",
    "template": "对话模板（`qwen`、`llama3`、`default` 等），或 `jinja` 使用分词器自带模板。",
    # ---- data
    "dataset": "dataset_info.json 中的训练数据集名称，多个用逗号分隔。",
    "eval_dataset": "评估数据集名称（替代 val_size）。",
    "dataset_dir": "包含 dataset_info.json 与数据文件的目录。",
    "cutoff_len": "每个样本的最大 token 数，超出部分截断。",
    "max_samples": "每个数据集最多使用的样本数。",
    "val_size": "从训练数据中划出的验证集比例（0-1）或样本数（>=1）。",
    "train_on_prompt": "提示部分的 token 也参与训练（默认只训练助手回复的 token）。",
    "mask_history": "只训练每段对话最后一轮助手回复。",
    "mix_strategy": "多个数据集的混合方式。",
    "interleave_probs": "交错混合时各数据集的采样概率，逗号分隔。",
    "dataset_sampling": "按数据集（名称同 dataset / eval_dataset 中的写法）：`{size: N, weight: W}`，"
    "即 LLaMA-Factory v1 数据集列表的键，抽样方式同 v1："
    "`size` 有放回地随机抽取 N 条记录，`weight` 再从中有放回地抽取 `int(数量 × W)` 条；抽样由 seed 决定。"
    "在 dataset_info.json 的 num_samples 之后、max_samples 之前进行；"
    "运行时报告每个数据集的抽取数、不同记录数与重复数。v1 配置的数据集列表会设置它。",
    "preprocessing_num_workers": "分词使用的进程数（默认一个）。",
    "preprocessing_batch_size": "每个分词批次的样本数。",
    "overwrite_cache": "即使存在指纹相同的缓存结果也重新分词。",
    "tokenized_path": "把分词后的数据集保存到此处；若已存在则直接读取（跳过分词）。"
    "保存的目录记录了数据行所依赖的设置（阶段、模板、分词器、cutoff_len、掩码、打包、媒体设置与文件、数据集）；"
    "为其他配置生成的目录会被拒绝并指明原因（overwrite_cache: true 重新分词）。",
    "packing": "把多个样本拼接成一个序列（pt 默认开启，其他阶段默认关闭）。",
    "neat_packing": "拼接样本之间互不注意：每个样本的位置编号重新开始，只注意自身。",
    "padding_free": "无填充批次：一个微批的所有序列拼成一行、不加填充、不传注意力掩码，每个序列的位置编号重新开始，"
    "注意力不跨序列（sft、pt；dpo/kto/rm 的一对回答在同一行；不可与 packing 同用）。",
    "batching_strategy": "LLaMA-Factory v1 的批次方式名称，读作 tunekit 的选项：padding_free = padding_free: true；"
    "dynamic_batching = max_tokens_per_batch: cutoff_len × per_device_train_batch_size；dynamic_padding_free = 两者；"
    "normal = 都不用。",
    "max_tokens_per_batch": "按词元数而非样本数组成微批次（动态批次）：padding_free 时计真实词元，否则计 行数 × "
    "最长行；不小于 cutoff_len。dpo 和 rm 以一对为单位，计两条序列（不小于 2 × cutoff_len）；不支持 kto。",
    "default_system": "样本没有系统提示词时使用的系统提示词（覆盖模板默认值）。",
    "enable_thinking": "推理模板（`qwen3` 等）：保留思考过程；false 时渲染空的 `<think></think>`。",
    "preserve_thinking": "推理模板（qwen3、qwen3_vl、deepseekr1、gpt_oss）：不训练的历史回复（mask_history；"
    "dpo、kto、rm、ppo、grpo 样本中的历史）保留其 `<think>` 块（没有思考的回复为空块），"
    "而官方 Qwen3 模板会去掉它（同 LLaMA-Factory 的 preserve_thinking）。"
    "enable_thinking: false 时思考被移除，历史回复保留空块。"
    "每条回复都训练时（sft 不用 mask_history）无影响。`tunekit chat`、`tunekit api`、`tunekit predict` "
    "以同样方式渲染历史回复；导出模型的对话模板仍是官方模板。",
    "thought_loss_weight": "推理模板（qwen3、qwen3_vl、deepseekr1、gpt_oss），sft 阶段："
    "回复中思考块（`<think>` … `</think>` 及其后的空行；"
    "没有思考的回复为空块）的损失权重。1：与答案同等训练（默认）；0：不训练（标签 -100，仍留在输入中）；介于两者之间："
    "思考词元按此权重计入，损失除以整步的权重之和。需要 enable_thinking。",
    "tool_format": "函数调用的工具调用格式（默认：模板自带的格式）。",
    "empty_template_eos": "`template: empty` 时每条回复以 EOS 结尾，让模型学会停止；false 时不加 EOS（同 "
    "LLaMA-Factory）。",
    "bad_records": "遇到无效记录时：error（停止并指出该记录）或 skip（跳过、计数并报告）。",
    "ignore_pad_token_for_loss": "填充 token 的标签设为 -100（不参与训练）。",
    "pad_to_multiple_of": "把每个批次填充到该 token 数的整数倍。",
    "group_by_length": "把长度相近的样本放在同一批次以减少填充。",
    "elementwise_recompute": "不保存门控 MLP 激活函数的输出、其乘积以及 RMSNorm 的输出，只保存重算方法，"
    "在反向传播时重算（结果逐位相同）：未做梯度检查点的每个解码层约省 45 % 激活内存，代价是几次逐元素运算。"
    "torch_compile 与 enable_liger_kernel 时关闭。",
    "group_within_step": "在每次优化器更新内按长度重组微批：样本相同、梯度相同、填充更少（sft、pt、dpo、rm；dpo/rm "
    "整对移动，仅限大小相同的填充批次）。不用于 kto：其 KL 估计按微批计算。",
    # ---- stage and method
    "stage": "训练阶段：pt（预训练）、sft、rm、ppo、dpo、kto、grpo。",
    "finetuning_type": "微调方法：lora、oft、freeze（只训练最后几层）、full（全参数）、ptuning（深度前缀微调，"
    "每层注意力前加可训练的键值前缀）或 prompt（提示微调：输入前加可训练的虚拟词元）。",
    "pre_seq_len": "ptuning：每层注意力前可训练前缀的长度（ChatGLM 脚本的名称；即 peft 的 num_virtual_tokens）。",
    "prefix_projection": "ptuning：用两层 MLP 从 pre_seq_len 个可训练嵌入计算前缀；保存的适配器存计算出的前缀。",
    "prefix_hidden_size": "ptuning：前缀 MLP 的隐藏层大小（peft 的 encoder_hidden_size；默认：一层键值的宽度）。",
    "num_virtual_tokens": "prompt：放在输入嵌入之前的可训练虚拟词元个数（由随机选取的词表嵌入初始化）。",
    "do_train": "执行训练。未设置时为 true，除非设置了 do_predict 或 do_eval（此时只运行它们）。",
    "do_eval": "在验证数据上评估（开启 do_train 时在训练之后）。",
    "do_predict": "为评估数据生成预测并评分。",
    "lora_rank": "LoRA 秩 r。",
    "lora_alpha": "LoRA 缩放系数 alpha（默认 2 × lora_rank）。",
    "lora_dropout": "LoRA 输入的 dropout。",
    "lora_target": "添加适配器的模块：all 或逗号分隔的模块名。",
    "additional_target": "额外全量训练并随适配器保存的模块（如 embed_tokens,lm_head）。",
    "use_rslora": "秩稳定的 LoRA 缩放 alpha/sqrt(r)（rsLoRA）。",
    "use_dora": "权重分解的 LoRA（DoRA）。",
    "pissa_init": "用主奇异向量初始化 LoRA（PiSSA）。",
    "pissa_iter": "PiSSA 快速 SVD 的迭代次数（-1 = 精确 SVD）。",
    "pissa_convert": "保存时把 PiSSA 适配器转换为普通 LoRA 适配器。",
    "loraplus_lr_ratio": "LoRA+：B 矩阵与 A 矩阵的学习率之比。",
    "create_new_adapter": "在 adapter_name_or_path 之上新建一个适配器，而不是继续训练最后一个。",
    "freeze_trainable_layers": "冻结训练：训练最后 N 层（负数：最前面 -N 层）。",
    "freeze_trainable_modules": "冻结训练：这些层中参与训练的模块，逗号分隔（all = 全部模块）。",
    "freeze_extra_modules": "冻结训练：层之外额外训练的模块（如 `embed_tokens,norm`）。",
    "use_llama_pro": "LLaMA Pro：只训练 `tunekit expand-blocks` 插入的扩展块（需要 finetuning_type: freeze）。",
    "oft_rank": "OFT：每个权重的正交块数（0 = 由 oft_block_size 推出；二者设其一："
    "设置了 oft_rank 时不再使用 oft_block_size 的默认值）。",
    "oft_block_size": "OFT：每个正交块的大小（0 = 由 oft_rank 推出）。",
    "oft_target": "OFT：添加正交适配器的线性模块（all = 除 LM 头外的全部线性层），逗号分隔。",
    "module_dropout": "OFT：训练时整块的乘性 dropout。",
    # ---- hyper-parameters
    "learning_rate": "峰值学习率。",
    "num_train_epochs": "训练轮数（可为小数）。",
    "max_steps": "最多训练步数（覆盖 num_train_epochs）；-1 表示按 num_train_epochs 训练。",
    "per_device_train_batch_size": "每个设备的微批大小。",
    "per_device_eval_batch_size": "每个设备的评估批大小。",
    "gradient_accumulation_steps": "每次优化器更新累积的微批数。",
    "lr_scheduler_type": "预热后的学习率调度方式。",
    "lr_scheduler_kwargs": "学习率调度器的额外参数（如 {min_lr_rate: 0.1}）。",
    "warmup_ratio": "预热步数占总步数的比例。",
    "warmup_steps": "线性预热步数（大于 0 时优先于 warmup_ratio）；小于 1 的小数表示占总步数的比例（与 "
    "transformers 5 相同）。",
    "optim": "优化器，Hugging Face 接受的任意名称（adamw_torch_fused = 单个融合算子，Hugging Face 默认）。",
    "weight_decay": "解耦的权重衰减。",
    "adam_beta1": "Adam 的 beta1。",
    "adam_beta2": "Adam 的 beta2。",
    "adam_epsilon": "Adam 的 epsilon。",
    "max_grad_norm": "把梯度的全局范数裁剪到此值（0 = 不裁剪）。",
    "neftune_noise_alpha": "NEFTune：训练时给输入词嵌入加上 ±alpha/sqrt(L×d) 内的均匀噪声"
    "（L 为批内每行的词元数，d 为隐藏维度；由 transformers 的 Trainer 挂钩实现，评估与生成时不加）；"
    "论文取 5 到 15。用于 sft 和 pt 阶段；dpo 和 kto 仅当参考模型不受噪声影响时可用"
    "（ref_model、precompute_ref_log_probs，或 full / freeze / oft）。留空或 0：关闭。",
    "seed": "初始化、打乱数据和划分验证集的随机种子。",
    "data_seed": "只用于打乱数据的随机种子（默认：seed）。",
    "bf16": "bfloat16 混合精度。未设置时由设备决定：计算能力 8.0 以上的 GPU 和原生支持 bf16 的 CPU（AVX512_BF16/AMX）"
    "上开启；写明 false 则为 fp32。",
    "fp16": "float16 混合精度（GPU）。未设置时由设备决定：计算能力低于 8.0 的 GPU（无 bf16）上开启，fsdp 除外。",
    "tf32": "在 Ampere 及更新的 GPU 上允许 TF32 矩阵乘法。",
    "pure_bf16": "完全以 bfloat16 训练：权重、梯度和优化器状态都是 bf16，没有 fp32 主权重和自动混合精度。",
    "fp8": "通过 accelerate 的 FP8 混合精度（torchao / Transformer Engine）：需要 Hopper 或更新的 GPU。",
    "fp8_backend": "FP8 后端：auto 或 torchao（torchao 的 Float8Linear，按行缩放；需 fp8 附加包）、te（NVIDIA "
    "Transformer Engine）；msamp 不支持。",
    "fp8_enable_fsdp_float8_all_gather": "FP8：以 float8 all-gather FSDP2 权重（torchao，按张量缩放）。",
    "use_cpu": "即使有可见 GPU 也在 CPU 上训练。",
    "dataloader_num_workers": "数据加载器的工作进程数。",
    "dataloader_pin_memory": "锁页内存以加快向 GPU 的拷贝。",
    "ddp_timeout": "一个进程等待其他进程的秒数，超时则失败。",
    "include_num_input_tokens_seen": "统计已见过的输入 token 数（记录为 num_input_tokens_seen）。",
    "eval_strategy": "训练中何时评估（也接受旧名称 evaluation_strategy，旧版 LLaMA-Factory 示例这样写）。",
    "eval_steps": "每 N 步评估一次（默认：logging_steps）。",
    "torch_compile": "用 torch.compile 编译模型。",
    "use_reentrant_gc": "梯度检查点使用 PyTorch 的可重入实现（LLaMA-Factory 默认 true），"
    "而不是不可重入实现（transformers 默认 false）；两者梯度相同。",
    "gradient_checkpointing_layers": "开启梯度检查点时只对这么多个（最底层的）解码层重算，其余层保留激活、不再重算。"
    "留空 = 全部层；auto 会设为放得下所需的最少层数。",
    "trained_tokens_loss": "只对参与训练（有标签）的 token 计算 LM 头和交叉熵：损失相同，计算更少。",
    "chunked_lm_loss": "配合 trained_tokens_loss：LM 头和交叉熵按 token 分块计算，梯度同步求出，从不完整保存 token × "
    "词表的 logits（损失相同；对会改动 LM 头输出的模型，如 logit 软截断，自动退回普通路径）。在 dpo 和 kto 中："
    "回答的对数概率（策略与参考模型）同样分块计算。",
    "auto_fit": "训练前由显存规划选择批大小、梯度累积、重算和 ZeRO，使其放得进 GPU。",
    "use_dft_loss": "DFT 损失（Wu 等，2025）：每个训练 token 的交叉熵乘以其（不求导的）概率。",
    "use_eaft_loss": "EAFT 损失：每个训练 token 的交叉熵乘以模型（top-20）熵 / 3 的 eaft_alpha 次方。",
    "eaft_alpha": "EAFT：熵权重的指数。",
    "use_asft_loss": "ASFT 损失：DFT 损失 + asft_alpha × 每个训练 token 上相对冻结初始模型的 KL。",
    "asft_alpha": "ASFT：KL 项的权重。",
    # ---- optimizers (GaLore, APOLLO, BAdam, Muon, Adam-mini)
    "use_galore": "GaLore：把目标线性层权重的梯度投影到低秩（galore-torch）；仅全参数微调。",
    "galore_target": "GaLore：被投影的线性模块（all = 除 LM 头外的全部线性层），逗号分隔。",
    "galore_rank": "GaLore：投影后梯度的秩。",
    "galore_update_interval": "GaLore：重新计算投影（梯度 SVD）之间的优化器步数。",
    "galore_scale": "GaLore：投影回去的更新的缩放系数。",
    "galore_proj_type": "GaLore：投影哪一侧（std = 较小的维度）。",
    "galore_layerwise": "GaLore：每个权重的梯度一就绪就更新并释放（更省显存；不支持梯度累积）。",
    "use_apollo": "APOLLO：用低秩辅助空间近似梯度缩放（apollo-torch）；仅全参数微调。",
    "apollo_target": "APOLLO：作用的线性模块（all = 除 LM 头外的全部线性层），逗号分隔。",
    "apollo_rank": "APOLLO：辅助空间的秩。",
    "apollo_update_interval": "APOLLO：两次更新投影之间的优化器步数。",
    "apollo_scale": "APOLLO：更新的缩放系数。",
    "apollo_proj": "APOLLO：投影方式（random = 带种子的高斯随机投影，svd = 梯度的 SVD）。",
    "apollo_proj_type": "APOLLO：投影哪一侧。",
    "apollo_scale_type": "APOLLO：按通道或按张量的缩放因子（tensor = 秩为 1 的 APOLLO-Mini）。",
    "apollo_layerwise": "APOLLO：每个权重的梯度一就绪就更新（更省显存；不支持梯度累积和裁剪）。",
    "apollo_scale_front": "APOLLO：在梯度缩放之前应用范数增长限制。",
    "use_badam": "BAdam：每次只用 Adam 训练一个块（一个解码层），定期切换块（`badam`）；仅全参数微调。",
    "badam_mode": "BAdam：layer = 每块一个解码层；ratio = 每个权重矩阵的一部分（badam_update_ratio）。",
    "badam_start_block": "BAdam layer 模式：第一个块的序号（默认由 badam_switch_mode 决定）。",
    "badam_switch_mode": "BAdam layer 模式：各块的训练顺序。",
    "badam_switch_interval": "BAdam layer 模式：每个块训练的优化器步数（-1 = 从不切换）。",
    "badam_update_ratio": "BAdam ratio 模式：每个权重矩阵被更新的比例。",
    "badam_mask_mode": "BAdam ratio 模式：被更新的元素相邻或分散。",
    "badam_verbose": "BAdam：0 = 不输出，1 = 打印当前块，2 = 打印其参数。",
    "use_muon": "Muon（torch.optim.Muon）用于二维隐藏层权重矩阵，嵌入、LM 头、归一化和偏置用 AdamW。",
    "use_adam_mini": "Adam-mini（adam-mini）：每个块（注意力头、神经元）一个二阶矩值，而不是每个权重一个。",
    # ---- RLHF and preference
    "pref_beta": "偏好损失的 beta（对参考模型 KL 约束的强度）。",
    "pref_ftx": "混入 DPO 损失的、对优选回答的 SFT 损失权重。",
    "pref_loss": "偏好损失：sigmoid（DPO）、hinge、ipo、orpo、simpo。",
    "dpo_label_smoothing": "sigmoid 损失的标签平滑（cDPO）。",
    "simpo_gamma": "SimPO 的目标奖励间隔。",
    "kto_chosen_weight": "KTO 中期望样本的权重。",
    "kto_rejected_weight": "KTO 中不期望样本的权重。",
    "ref_model": "参考模型路径（默认：冻结的基座；使用 LoRA 时禁用适配器作为参考）。",
    "ref_model_adapters": "参考模型的适配器。",
    "precompute_ref_log_probs": "训练前一次性计算参考模型的对数概率（之后释放参考模型）。",
    "reward_model": "ppo/grpo 使用的奖励模型目录。",
    "reward_model_adapters": "奖励模型的适配器。",
    "reward_model_type": "reward_model 是策略基座上的 LoRA 适配器还是完整模型。",
    "reward_funcs": "grpo/ppo 的奖励函数，点号路径（package.module:function），逗号分隔，结果相加。",
    "num_generations": "GRPO：每个提示采样的回答数。",
    "ppo_epochs": "PPO：每批 rollout 的优化轮数。",
    "ppo_buffer_size": "PPO：LLaMA-Factory 的 rollout 缓冲区；tunekit 每个微批 rollout 后复用 ppo_epochs 次。",
    "ppo_target": "PPO：自适应 KL 控制器的目标 KL。",
    "ppo_score_norm": "PPO：归一化得分。",
    "ppo_whiten_rewards": "PPO：计算优势前白化奖励。",
    "cliprange": "PPO/GRPO：策略比率的裁剪范围。",
    "cliprange_value": "PPO：价值函数的裁剪范围。",
    "gamma": "PPO：折扣因子。",
    "lam": "PPO：GAE 的 lambda。",
    "vf_coef": "PPO：价值损失系数。",
    "grpo_beta": "GRPO：相对参考模型的 KL 系数。",
    "grpo_iterations": "GRPO：每次 rollout 的优化器步数（>1 时离策略复用，由裁剪限制更新幅度）。",
    "ppo_kl_coef": "PPO：相对参考模型的逐 token KL 惩罚初始系数（向 ppo_target 自适应）。",
    "ppo_adaptive_kl": "PPO：把 KL 系数向 ppo_target 自适应调整（Ziegler 等，2019）。",
    "rollout_temperature": "PPO/GRPO：rollout 的采样温度（top_p 为 1，不用 top_k）。",
    "generation_max_new_tokens": "PPO/GRPO：每次 rollout 生成的 token 数。",
    # ---- distributed
    "deepspeed": "DeepSpeed 配置文件路径或预设：z0、z2、z2_offload、z3、z3_offload。",
    "fsdp": "FSDP2 分片：full_shard、shard_grad_op 或 no_shard；加上 `offload` 把参数卸载到 CPU。",
    "fsdp_config": "FSDP 配置 JSON 文件路径（高级）。",
    "fsdp_transformer_layer_cls_to_wrap": "使用 fsdp 时作为独立 FSDP 单元分片的模块类名，逗号分隔"
    "（如 LlamaDecoderLayer）；每个类都必须存在于加载的模型中。留空：使用模型自身的解码层类（_no_split_modules）。",
    "ddp_find_unused_parameters": "DDP：查找没有梯度的参数（更慢；某些模型需要）。",
    "ddp_backend": "torch.distributed 后端（GPU 默认 `nccl`，CPU 默认 `gloo`）。",
    "cp_size": "上下文并行：每条序列分到这么多个进程上（按位置切成等长的几段），每个进程只保存序列 1/cp_size 的激活；"
    "进程总数必须是它的整数倍。全局批量 = 每设备批量 × 累积步数 × 进程数 / cp_size。1：关闭。",
    "cp_mode": "cp_size 大于 1 时注意力如何看到整条序列：ulysses（一次 `all-to-all` 交换让每个进程在全部位置上计算 "
    "1/cp_size 的注意力头；注意力头数必须能被 cp_size 整除）。",
    "ray_num_workers": "USE_RAY=1：`Ray Train` 启动的训练进程数（即进程总数），每块 GPU 一个。",
    "resources_per_worker": 'USE_RAY=1：每个工作进程的 Ray 资源，如 {"GPU": 1, "CPU": 8}。留空：Ray 集群有 GPU 时'
    "每个工作进程 1 块 GPU（LLaMA-Factory 的默认值），否则 1 个 CPU。",
    "placement_strategy": "USE_RAY=1：Ray 如何把工作进程放到集群的节点上（PACK：尽量少的节点）。",
    "ray_run_name": "USE_RAY=1：运行名称；Ray 把运行记录保存在 ray_storage_path/ray_run_name。",
    "ray_storage_path": "USE_RAY=1：Ray 保存运行记录的位置（tunekit 的检查点、日志和模型仍写到 output_dir，与不用 "
    "Ray 时相同）。",
    "ray_init_kwargs": "USE_RAY=1：传给 ray.init 的参数，如 `{address: auto}` 加入正在运行的集群，或用 runtime_env "
    "设置 env_vars。留空：ray.init()（RAY_ADDRESS 中的集群，否则启动本地集群）。",
    # ---- logging and output
    "output_dir": "模型、检查点、日志和图像的输出目录。",
    "overwrite_output_dir": "允许写入非空的 output_dir。",
    "logging_steps": "每 N 步记录一次损失、学习率和梯度范数。",
    "logging_first_step": "也记录第一步。",
    "save_strategy": "何时保存检查点。",
    "save_steps": "每 N 步保存一次检查点。",
    "save_total_limit": "最多保留的检查点数（新检查点完整后才删除最旧的；最佳检查点保留）。",
    "save_only_model": "检查点不含优化器/调度器状态（无法精确恢复训练）。",
    "resume_from_checkpoint": "从检查点目录恢复；true：output_dir 中最新的完好检查点（没有则报错）；auto：有则恢复。",
    "load_best_model_at_end": "训练结束时重新加载评估指标最好的检查点。",
    "metric_for_best_model": "load_best_model_at_end 使用的指标（默认：`loss`）。",
    "plot_loss": "在 output_dir 中保存 training_loss.png。",
    "report_to": "实验跟踪工具，逗号分隔：`none`、`tensorboard`、`wandb`、`swanlab`、`mlflow`（各需对应的包）。",
    "run_name": "在跟踪工具中显示的运行名称。",
    "disable_tqdm": "隐藏进度条。",
    "use_swanlab": "记录到 SwanLab（LLaMA-Factory 的参数；等同于在 report_to 中加入 `swanlab`）。",
    "swanlab_project": "SwanLab 项目名。",
    "swanlab_workspace": "SwanLab 工作空间。",
    "swanlab_run_name": "SwanLab 实验名。",
    "swanlab_mode": "SwanLab 模式：cloud 需要网络和 API 密钥；local/offline 写入本地磁盘。",
    "swanlab_api_key": "SwanLab API 密钥（或设置环境变量 SWANLAB_API_KEY）。",
    "swanlab_logdir": "SwanLab 本地日志目录（默认：output_dir/swanlog）。",
    # ---- export
    "export_dir": "导出模型的目录。",
    "export_size": "单个 safetensors 分片的最大大小（GB）。",
    "export_device": "合并时使用的设备。",
    "export_legacy_format": "写出 `.bin`（pickle）文件而不是 safetensors。",
    "export_quantization_bit": "把导出的模型量化为 4 或 8 比特。",
    "export_quantization_dataset": "GPTQ 导出的校准数据（dataset_info.json 中的数据集名或文件）。",
    "export_quantization_nsamples": "校准样本数。",
    "export_quantization_maxlen": "校准样本的长度（token 数）。",
    "export_hub_model_id": "把导出结果推送到此模型仓库。",
    "export_quantization_method": "量化导出方式：gptq = 以 export_quantization_dataset 为校准数据的 GPTQ。",
    "export_verify": "导出结束时用原生 transformers 检查导出的目录（`tunekit verify`）。",
    "export_format": "导出格式：safetensors = Hugging Face 目录；gguf = 由 llama.cpp 自带转换脚本生成的单个 GGUF 文件"
    "（需要 gguf 扩展），旁边附带 Ollama Modelfile，并在 llama.cpp 中校验。",
    "export_gguf_type": "GGUF 张量类型（export_format: gguf；默认 f16）：f32、f16、bf16，"
    "或由 llama.cpp 量化的 q8_0 / q4_k_m。",
    # ---- inference
    "infer_backend": "推理引擎。",
    "infer_dtype": "推理时权重的数据类型。",
    "do_sample": "采样（true）或贪心解码（false）。",
    "temperature": "采样温度。",
    "top_p": "核采样概率质量。",
    "top_k": "Top-k 采样（0 = 关闭）。",
    "num_beams": "束搜索宽度。",
    "max_new_tokens": "每次回复最多生成的 token 数。",
    "repetition_penalty": "重复 token 的惩罚（1 = 不惩罚）。",
    "length_penalty": "束搜索的长度惩罚。",
    "predict_with_generate": "通过生成来预测（用于 do_predict）。",
    "generation_seed": "`chat`、`api` 和面板中采样回复的种子（n 个回复中第 i 个用 generation_seed + i）；"
    "未设置则每次不同。",
    "api_max_tokens": "API：请求可要求的最大 max_tokens（超过则返回 400）；同时受模型上下文长度限制。",
    "api_queue_timeout": "API：已有 1 + api_max_queue 个请求在服务时，新请求等待空位的秒数，超时返回 429 和 "
    "Retry-After。",
    "api_max_queue": "API：同时服务 1 + api_max_queue 个请求，其生成逐 token "
    "轮流进行（不能轮流生成的模型一次只服务一个）；最多再有 api_max_queue 个请求等待空位（api_queue_timeout），"
    "更多请求立即返回 429。",
    "api_stream_timeout": "API：流式数据块等待客户端读取的秒数；停止读取的客户端会被断开。",
    "api_parse_special_tokens": "API：把请求消息中写出的控制 token（如 <|im_end|>）解析为控制 token；"
    "关闭时按普通文本处理。",
    "api_media_dir": "API：客户端可在 image_url / video_url / audio_url 中引用的文件夹（`file://` 或路径；"
    "解析符号链接和 ..，其外的文件一律拒绝）。未设置时不读取任何文件，媒体只能以 base64 `data:` URL 内联发送；"
    "未设置时读取 LLaMA-Factory 的 SAFE_MEDIA_PATH 环境变量。",
    "api_max_media_mb": "API：单个图像、视频或音频解码后的最大大小（MB，10^6 字节）；超过则返回 413。",
    # ---- multimodal
    "image_max_pixels": "交给图像处理器的最大图像面积（高 × 宽，像素）；更大的图像会缩小。默认："
    "模型文件夹中处理器的设置（Qwen2-VL 为其 max_pixels；没有该设置的模型族按原图）。",
    "image_min_pixels": "最小图像面积（像素）；更小的图像会放大。默认：模型文件夹中处理器的设置（Qwen2-VL 为其 "
    "min_pixels）。",
    "video_max_pixels": "视频帧的最大面积（像素），每帧先缩小再交给视频处理器。默认：不设（按视频处理器自身的限制）。",
    "video_min_pixels": "视频帧的最小面积（像素），每帧先放大再交给视频处理器。默认：不设（按视频处理器自身的限制）。",
    "video_fps": "每秒视频采样的帧数。默认：模型文件夹中视频处理器的 `fps`（没有则为 2，与 Qwen-VL 相同）。",
    "video_maxlen": "每个视频最多采样的帧数。默认：模型文件夹中视频处理器的 max_frames（Qwen-VL 类默认 768）。",
    "audio_sampling_rate": "音频重采样的采样率（Hz）。默认：模型文件夹中特征提取器的采样率。",
    "use_audio_in_video": "同时使用每个视频的音轨（音视频模型系列）。",
    "media_dir": "数据中图像/视频/音频相对路径的根目录（默认：dataset_dir）。",
    "freeze_vision_tower": "冻结视觉编码器。使用 LoRA 时，false 也会给其线性层加适配器。",
    "freeze_multi_modal_projector": "冻结多模态投影层（视觉 → 语言，如 Qwen2-VL 的 merger）。使用 LoRA 时，false "
    "也会给它加适配器。",
    "freeze_language_model": "冻结语言模型（只训练未冻结的视觉部分）。",
}


def help_zh(name: str) -> str | None:
    """The Chinese help of option ``name`` (None when the table has no entry yet)."""
    return HELP_ZH.get(name)
