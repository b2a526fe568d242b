"""The errors a training, export or config-reading job fails with, in Chinese (what a failed job says on the board):
one template per key of :data:`tunekit.config.problem_texts_run.ENGLISH_RUN`, the same placeholders
(``tests/webui/test_problems_zh.py`` holds every key to one), and env.py's errors (:data:`ZH_ENV`); paths, option
names, environment variables, values and code stay as they are."""

from __future__ import annotations

ZH_RUN: dict[str, str] = {
    # the model folder and its files
    "model_path_unset": "未设置 {option}：请填写本地模型目录或 Hugging Face 模型 ID（例如 Qwen/Qwen2.5-0.5B-Instruct）"
    "。",
    "model_folder_missing": "模型目录 {path} 不存在（{option}）。请检查路径，或使用 Qwen/Qwen2.5-0.5B 这样的模型 ID。",
    "model_path_is_file": "{option} {path} 是一个文件，不是模型目录：请填写存放 config.json 和权重的目录{parent}。",
    "part_model_parent": "（即目录 {path}）",
    "model_is_adapter": "{path} 是 LoRA 适配器目录（含 adapter_config.json），不是模型：请把 {option} 设为它的基座模型"
    "（{base}），并设置 adapter_name_or_path: {path}。",
    "part_the_base_model": "基座模型",
    "model_no_config": "{path} 中没有 config.json：它不是 Hugging Face 模型目录。",
    "model_config_not_utf8": "{file} 不是 UTF-8 文本（第 {byte} 个字节）：它不是模型配置；请重新下载或重新保存模型。",
    "model_config_bad_json": "{file} 不是有效的 JSON（第 {line} 行，第 {column} 列：{error}）；请重新下载模型或修正该"
    "文件。",
    "model_config_not_object": "{file} 必须是一个 JSON 对象，实际为 `{kind}`；请重新下载模型。",
    "model_no_weights": "{path} 中有 config.json 但没有权重（`model.safetensors`、`model-*-of-*.safetensors` 或 "
    "pytorch_model.bin）：请把权重文件复制进去，或把 model_name_or_path 指向完整的模型。",
    "model_bad_safetensors": "{file} 不是可读取的 safetensors 文件（{error}）：文件被截断或已损坏；请重新下载或重新保"
    "存模型。",
    "model_truncated_zip": "{file} 是被截断的 PyTorch 检查点（缺少 `zip` 目录）；请重新下载或重新保存模型。",
    "model_not_checkpoint": "{file} 不是 PyTorch 检查点（它以 {head} 开头，既不是 `zip` 也不是 pickle）；请重新下载或"
    "重新保存模型。",
    "model_hub_unloadable": "无法加载 '{path}'（{why}）。请在联网时下载它（`huggingface-cli download {path}`），或把 "
    "model_name_or_path 指向本地目录。",
    "part_hub_offline_uncached": "已设置 HF_HUB_OFFLINE，而本地缓存中没有它",
    "model_config_invalid": "{where} 不是有效的配置（{why}）；请修正该字段，或重新下载模型的 config.json。",
    "part_config_of": "{path} 的 config.json",
    "model_tokenizer_code": "{path} 自带分词器代码；如果信任它，请设置 trust_remote_code: true。",
    "model_tokenizer_unloadable": "无法加载 {path} 的分词器（{error}）；请把基座模型的分词器文件复制进去。",
    "model_no_tokenizer_files": "{path} 中没有分词器文件（{files} 等）：从中加载的分词器只有 {count}，什么也学不到。请"
    "把它所来自的模型的分词器文件复制到 {path}。",
    "part_one_token": "{size} 个 token",
    "part_tokens": "{size} 个 token",
    "model_no_model_type": "{file} 中没有 model_type：transformers 无法判断模型架构；请重新下载模型的 config.json。",
    "model_code": "{path} 需要它自己的建模代码；如果信任它，请设置 trust_remote_code: true。",
    "model_config_unusable": "{file} 无法使用（{error}）；请检查它是否是这个模型的配置（model_type、架构字段）。",
    "model_fa2_package": "flash_attn: fa2 需要 flash-attn 包（`pip install flash-attn --no-build-isolation`）和 NVIDIA"
    " GPU；或改用 flash_attn: sdpa。",
    "model_fa2_no_gpu": "flash_attn: fa2 需要 NVIDIA GPU，但当前没有可见的 GPU；在这台机器上请使用 flash_attn: sdpa。",
    "model_rope_no_positions": "rope_scaling：该模型的配置中没有可供缩放的 max_position_embeddings。",
    "model_liger_package": "enable_liger_kernel 需要 liger-kernel 包（`pip install liger-kernel`）和 GPU。",
    "model_liger_no_gpu": "enable_liger_kernel 需要 GPU（Liger 的算子是 `Triton` GPU 算子），但当前没有可见的 GPU。在 "
    "CPU 上请删除该参数。",
    "model_unsloth_missing": "use_unsloth 需要 unsloth 包和 NVIDIA GPU；在这台机器上请删除它。",
    "model_unsloth_unwired": "tunekit 尚未接入 use_unsloth；请删除它（enable_liger_kernel 可在 GPU 上提供融合算子）。",
    "model_weights_mismatch": "{path} 中的权重不属于其 config.json 的架构（{architecture}）：{parts}。请确认 "
    "config.json 和权重文件来自同一个模型；如果这种差异是有意的，请设置 allow_new_weights: true。",
    "part_weights_missing": "缺少 {count} 个它需要的权重，它们会随机初始化（例如 {names}）",
    "part_weights_unexpected": "目录中有 {count} 个权重在该架构中没有位置，会被丢弃（例如 {names}）",
    "part_weights_both": "{missing}；{unexpected}",
    "model_weights_unloadable": "无法加载 {path} 中的权重（{error}）。",
    "model_weights_shapes": "{path} 中的权重不属于其 config.json 的架构（{architecture}）：有些权重的形状与配置给出的"
    "不同（上方 transformers 的加载报告列出了它们）。请确认 config.json 和权重文件来自同一个模型。",
    "model_pickles_unreadable": "{path} 中的 {files} 无法作为权重读取（{kind}）：文件被截断、已损坏，或是需要运行代码"
    "的 pickle，而 tunekit 从不这样做（只加载权重）。请重新下载，或在生成它的地方把模型重新保存为 safetensors。",
    "model_attention_refused": "flash_attn: {value} 无法加载 {path}：transformers 提示 '{said}'。请使用 flash_attn: "
    "auto（由 transformers 为该模型自行选择）或 eager。",
    # LLaMA Pro block expansion
    "expand_layers_divide": "use_llama_pro：freeze_trainable_layers {count}（扩展出的块数）必须能整除模型的 {layers} "
    "层；请用 `tunekit expand-blocks --num-expand N` 扩展，并使用同一个 N。",
    "expand_out_not_empty": "{path} 不是空目录：请为扩展后的模型换一个新目录。",
    "expand_no_layers": "{path}/config.json 中没有 num_hidden_layers：无法扩展它的块。",
    "expand_num_divide": "`--num-expand` {count} 必须能整除 {path} 的 {layers} 层（例如 {divisors}）。",
    "expand_unmapped": "扩展 {path} 时有参数未能对应（缺少 {missing}，多出 {unexpected}）；该架构的块不在 "
    "`*.layers.N.` 之下。",
    # the run's folder and stage
    "run_stage_unavailable": "阶段 '{stage}' 暂不可用；可用的阶段：{names}。",
    "run_output_unset": "未设置 output_dir：请指定保存模型、检查点和日志的目录。",
    "run_output_is_file": "output_dir {path} 是一个文件，不是目录。",
    "run_output_not_empty": "output_dir {path} 不是空目录（{shown}）。设置 overwrite_output_dir: true 可写入其中，设置"
    " resume_from_checkpoint: true 可继续那次训练，或换一个新的 output_dir。",
    "run_dataset_unset": "未设置 dataset：请填写 dataset_info.json 中的一个或多个数据集名称（dataset: a,b），或填写文"
    "件路径。",
    # resuming
    "resume_other_options": "{what} 属于一次训练参数不同的运行（{path}）：{diffs}。用当前配置继续会把两次训练混在一起"
    "。请使用那次运行的参数值，或开始新的训练（换一个 output_dir，或设置 overwrite_output_dir: true 且不设置 "
    "resume_from_checkpoint）。",
    "part_resume_checkpoint": "检查点 {path}",
    "part_resume_finished_run": "{path} 中已完成的训练",
    "part_resume_run": "{path} 中的训练",
    "resume_none_complete": "resume_from_checkpoint: true 在 {path} 中没有找到完整的检查点{torn}。删除 "
    "resume_from_checkpoint 可从头开始，或使用 resume_from_checkpoint: auto。",
    "part_resume_diff": "{key}：原运行为 {there}，本次为 {here}",
    "part_resume_diff_batch": "全局批次（per_device_train_batch_size x gradient_accumulation_steps x 进程数）："
    "原运行为 {micro} x {accum} x {world} = {there}，本次为 {micro_here} x {accum_here} x {world_here} = {here}",
    "part_resume_torn": "（{checkpoints}）",
    "part_ckpt_no_marker": "它没有 {file}（运行可能在保存它时被终止了）",
    "part_ckpt_marker_unreadable": "它的 {file} 无法读取",
    "part_ckpt_file_missing": "缺少 {name}",
    "part_ckpt_file_size": "{name} 有 {size} 字节，保存时为 {saved} 字节",
    "part_ckpt_checksum": "{name} 与 {file} 中记录的校验和不符（保存后内容被改动过）",
    "part_ckpt_passed": "{name}（{problem}）",
    "resume_auto_foreign": "resume_from_checkpoint: auto 在 output_dir {path} 中既没有找到检查点也没有找到 {file}，而"
    "该目录不是空的（{shown}）：它不是 tunekit 训练的目录。请换一个新的 output_dir，或设置 overwrite_output_dir: true "
    "写入其中。",
    "resume_not_checkpoint": "resume_from_checkpoint {path} 不是检查点目录（没有 trainer_state.json）。",
    "resume_damaged": "检查点 {path} 不完整或已损坏：{problem}。{good}",
    "part_resume_good": "最新的完好检查点是 {path}。",
    "resume_without_deepspeed": "检查点 {path} 不是用 DeepSpeed 写的，DeepSpeed 无法加载它的优化器状态。请不用 "
    "deepspeed 恢复训练，{fresh}。",
    "resume_needs_deepspeed": "检查点 {path} 是用 DeepSpeed 写的（它的优化器状态在 DeepSpeed 的 global_step* 文件中）"
    "，而本次运行没有设置 deepspeed：transformers 会不声不响地重新初始化优化器。请用相同的 deepspeed 设置恢复训练，"
    "{fresh}。",
    "part_resume_fresh": "或从它的权重开始新的训练（{option}: {path}，不设置 resume_from_checkpoint；优化器状态和学习"
    "率调度随之从头开始）",
    "resume_zero_world": "检查点 {path} 是由 {written}写的 DeepSpeed ZeRO 检查点，而本次运行有 {current}：ZeRO 把优化"
    "器状态分给各个进程，DeepSpeed 无法把它重新切分给另一个进程数。请用 {written}恢复训练（`NPROC_PER_NODE x NNODES` ="
    " {count}），{fresh}。DDP 检查点（不用 deepspeed）可以用任意进程数恢复。",
    "part_one_process": "{count} 个进程",
    "part_processes": "{count} 个进程",
    # the stages
    "ref_precompute_zero3": "不支持在 DeepSpeed ZeRO-3 下对 LoRA 使用 precompute_ref_log_probs：参考模型是关闭适配器的"
    "策略模型，而 DeepSpeed 要到训练开始时才对它分片。请删除 precompute_ref_log_probs（LoRA 的参考模型不需要第二份模型"
    "副本），或使用 deepspeed: z2。",
    "rm_padding_free_vlm": "rm 阶段对视觉语言模型（{family} 系列）不支持 padding_free：它的媒体输入是按填充后的行构建"
    "的。请删除 padding_free。",
    "reward_import": "reward_funcs：无法导入 '{name}'（{error}）；请写成 package.module:function 的形式，并确保该模块"
    "可以导入（在 `PYTHONPATH` 上）。",
    "reward_not_function": "reward_funcs：'{name}' 不是函数。",
    "reward_count": "奖励函数 {name} 为 {n} 个生成结果返回了 {count} 个奖励。",
    "value_head_missing": "{path} 中没有 {file}：它不是 tunekit 保存的奖励模型（rm 阶段）。",
    # the launcher's environment
    "launch_not_whole": "{name}={value} 不是整数。",
    "launch_too_small": "{name}={value} 必须至少为 {minimum}。",
    "launch_node_rank": "NODE_RANK={rank} 必须小于 `NNODES`={nodes}（节点编号从 0 开始）。",
    "launch_too_many_procs": "NPROC_PER_NODE={nproc}，但只有 {devices} 块 GPU 可见（CUDA_VISIBLE_DEVICES={visible}"
    "）：请减小 NPROC_PER_NODE，或让更多设备可见。",
    "launch_master_addr": "`NNODES`={nodes}：请把 MASTER_ADDR 设为 NODE_RANK=0 那台机器的地址，每个节点都相同（以及 "
    "MASTER_PORT，默认 {port}）。",
    "launch_bad_port": "MASTER_PORT={port} 不是有效的 `TCP` 端口（1-65535）。",
    "launch_port_in_use": "MASTER_PORT {port} 在这台机器上已被占用（另一个训练，或仍在运行的旧进程？）：请换一个端口，"
    "例如 MASTER_PORT={free}；单机训练时也可以取消设置 MASTER_PORT，由 tunekit 自选空闲端口。",
    # the distributed engines
    "dist_world_size": "进程总数 {world} 必须至少为 1。",
    "cp_world": "cp_size {cp} 把每条序列分到 {cp} 个进程上，但本次运行只有 {world} 个进程：请启动 {cp} 的整数倍个"
    "进程（FORCE_TORCHRUN=1 加 NPROC_PER_NODE，或 torchrun --nproc_per_node），或去掉 cp_size。",
    "cp_media": "cp_size {cp}：{model} 接收媒体输入，其特征按词元位置放入整条序列；tunekit 的上下文并行只拆分纯文本"
    "模型。请去掉 cp_size。",
    "cp_heads": "cp_size {cp} 让每个进程分得 1/{cp} 的注意力头，但模型有 {heads} 个查询头和 {kv} 个键值头：cp_size "
    "必须同时整除两者（可选：{fits}）。请修改 cp_size（及进程数）或去掉它。",
    "cp_layer_types": "cp_size {cp}：模型含有 {types} 层，它们在上下文并行所拆分的注意力之外混合词元；上下文并行只"
    "适用于全部为完整注意力层的模型。请去掉 cp_size。",
    "cp_attention": "cp_size：上下文并行包装的是 sdpa 或 FlashAttention-2 注意力，但模型使用 {attention} 注意力："
    "请设置 flash_attn: sdpa（GPU 上也可用 fa2），或去掉 cp_size。",
    "cp_batch_keys": "cp_size {cp}：该微批次含有 {keys}，上下文并行无法拆分（它只拆分普通补齐行的 `input_ids`、"
    "`attention_mask` 和 `labels`）：请去掉 cp_size 或添加这些内容的选项。",
    "cp_left_padding": "cp_size {cp}：某个微批次的补齐位于词元之前；上下文并行对汇集后的序列只用因果掩码，仅在右侧"
    "补齐时精确。请去掉 cp_size。",
    "dist_wrap_twice": "fsdp_transformer_layer_cls_to_wrap 与 fsdp_config 中的 transformer_layer_cls_to_wrap 都已设置"
    "：请只保留其中一个。",
    "dist_fsdp_config_missing": "fsdp_config：{path} 不存在。",
    "dist_fsdp_activation": "fsdp_config：{path}：请用参数 gradient_checkpointing: true 代替 "
    "activation_checkpointing。",
    "dist_fsdp_unknown_keys": "fsdp_config：{path} 中有 tunekit 不使用的键：{keys}。tunekit 自己应用 FSDP2，只读取 "
    "{known}。",
    "dist_fsdp_version": "fsdp_config：{path}：tunekit 运行的是 FSDP2（版本 2）；transformers 已弃用 FSDP1。请删除 "
    "`version`。",
    "dist_deepspeed_cpu": "在有 GPU 的机器上不支持 deepspeed 与 use_cpu: true 同时使用：请删除 use_cpu，或隐藏 GPU（"
    "CUDA_VISIBLE_DEVICES=）让 DeepSpeed 在其 CPU 加速器上运行。",
    # exporting
    "export_dir_unset": "未设置 export_dir：请指定写入导出模型的目录。",
    "export_dir_is_source": "export_dir {path} 就是模型或适配器目录本身：请换一个新目录。",
    "export_dir_is_file": "export_dir {path} 是一个文件，不是目录。",
    "export_dir_foreign": "export_dir {path} 中有不是 tunekit 导出的权重（{files}；没有 {marker}）：导出会删除它们。请"
    "换一个新的或空的目录，或先移走这些文件。",
    "export_verify_failed": "{path} 中的导出未通过校验：{problems}",
    "export_push_failed": "把 {path} 以 {repo} 推送到 Hugging Face 失败（{error}）；请用 `huggingface-cli login` 登录"
    "并检查网络。导出结果本身在 {path} 中。",
    "zero_unreadable": "{path} 不是可读取的 torch 检查点文件（{kind}: {error}）；该 ZeRO 检查点已损坏或不完整。",
    "zero_pickle_code": "{path} 被拒绝：加载它会运行文件中的代码。它的 pickle 引用了 {names}，而 DeepSpeed ZeRO 检查"
    "点不含这些内容（除张量和普通数据外允许的有：{allowed}）。如果你信任写这个检查点的人，请用 `tunekit zero-to-fp32 "
    "{folder} OUT_DIR --trust-pickle` 显式合并它（会运行那些代码），再把 OUT_DIR 作为 model_name_or_path。",
    "zero_unsafe": "无法安全读取 {path}（{kind}: {error}）；该 ZeRO 检查点已损坏，或由 tunekit 不了解其文件布局的 "
    "DeepSpeed 版本写成（只有信任其来源时才加 `--trust-pickle`）。",
    "zero_not_model_states": "{path} 不是 DeepSpeed 的模型状态文件（没有 '{buffers}'/`module` 条目）。",
    "zero_not_optim_states": "{path} 不是 DeepSpeed ZeRO 的优化器状态文件（没有 '{entry}' 条目）。",
    "zero_partial": "{path} 中有 {count} 个 *_optim_states.pt 文件，但它是由 {world} 个进程写的：该检查点不完整（某个"
    "进程没有保存，或旧的检查点被覆盖了）。",
    "zero_unknown_stage": "{path}：未知的 ZeRO 阶段 {stage}。",
    "zero_damaged": "{path} 中的 ZeRO-{stage} 状态不完整或已损坏（{kind}: {error}）；请重新保存检查点，或使用更早的检"
    "查点。",
    "zero_not_checkpoint": "{path} 不是 DeepSpeed ZeRO 检查点：其中没有含 *_model_states.pt 文件的 global_step*/ 目录"
    "（也没有指向它的 `latest` 文件）。",
    "zero_no_config": "{path} 中有 ZeRO 权重但没有 config.json；请把模型的 config.json 复制进去（仅凭权重无法知道它们"
    "属于哪种架构）。",
    "zero_needs_deepspeed": "合并 ZeRO 检查点需要 deepspeed：`pip install 'tunekit[deepspeed]'`。",
    "zero_misfit": "{path} 的 ZeRO 状态与其 config.json 不符（缺少：{missing}，多出：{unexpected}）：它是否保存自 peft"
    "/LoRA 模型？适配器以 adapter_model.safetensors 的形式保存在检查点旁边；请用 adapter_name_or_path 导出它们。",
    "gptq_no_calibration": "export_quantization_dataset {value} 没有给出校准文本：它的记录中没有一条可读作对话或纯文本"
    "（见 docs/data-formats.md）。没有写入任何内容。",
    "gptq_runner_failed": "GPTQ 量化（{command}）失败，退出码 {code}：\n{tail}",
    "gptq_runner_no_result": "GPTQ 运行器结束时没有输出结果行；它的输出：\n{tail}",
    "gptq_groups": "{path}/config.json：应只有一个量化组，实际有 {count} 个",
    "gptq_check_failed": "{path} 中的 GPTQ 导出未通过检查：{problems}",
    # a config file
    "cfgfile_key_twice_at": "{path}：键 {key} 出现了两次（{where}）；请只保留一个。",
    "part_cfgfile_lines": "第 {line} 行和第 {line2} 行",
    "part_cfgfile_columns": "第 {line} 行的第 {column} 列和第 {column2} 列",
    "cfgfile_alias_bomb": "{path} 通过别名（`*name`）展开后超过 {limit:,} 个 YAML 节点（第 {line} 行）；一个配置只需要"
    "几十个：请把值直接写出来。",
    "cfgfile_alias_loop": "{path}：一个 YAML 别名引用了自身（第 {line} 行）；请去掉这个递归。",
    "cfgfile_key_twice": "{path}：键 {key} 出现了两次；请只保留一个。",
    "cfgfile_is_folder": "配置文件 {path} 是一个目录，不是文件：请填写其中的 YAML 或 JSON 文件。",
    "cfgfile_missing": "配置文件 {path} 不存在。",
    "cfgfile_not_utf8": "{path} 不是 UTF-8 编码：第 {byte} 个字节（第 {line} 行：{bytes}）无法解码。请把配置保存为 "
    "UTF-8，例如用 `iconv -f <ENCODING> -t UTF-8`。",
    "cfgfile_invalid": "{path} 不是有效的 {kind}：{why}",
    "cfgfile_empty": "{path} 中没有任何参数（文件为空或只有注释）：请把本次运行的参数以 `option: value` 的形式逐行写入"
    "（见 `tunekit train --help`）。",
    "cfgfile_not_mapping": "{path} 必须是“参数: 值”的映射，实际为 `{kind}`。",
    # the command line
    "args_no_name": "参数 {arg} 没有参数名；请写成 `--option value`。",
    "args_no_name_before_equals": "参数 {arg} 在 '=' 之前没有参数名；请写成 `option=value`（例如 learning_rate=1e-4）"
    "。",
    "args_unexpected": "意外的参数 {arg}：参数应写成 `key=value` 或 `--key value`（配置文件必须放在最前面）。",
    "args_folder_is_file": "{option} {path}：{existing} 是一个文件，不是目录；请换一个 {option}。",
    "args_folder_unwritable": "{option} {path} 无法写入（{error}，位于 {existing}）；请选择一个你有写权限的目录。",
    "adapter_unloadable": "无法加载适配器 {path}：{error}",
    "adapter_resume_unloadable": "无法加载适配器 {path} 以继续训练：{error}",
    "ft_layers_unknown": "无法得知该模型有多少层（config.json 中没有 num_hidden_layers）；请使用 finetuning_type "
    "lora 或 full。",
    "ft_freeze_modules_missing": "freeze_trainable_modules 指定的 {missing} 不在模型的层中；可用的有：{available}。",
    "ft_lora_rank_too_large": "lora_rank {rank} 超过了任何被适配的层所能使用的秩：d_in x d_out 层的 LoRA "
    "更新的秩最多为 `min(d_in, d_out)`，而被适配的层为 {widths}（输入 x 输出）；请把 lora_rank 设为不超过 {usable}。",
    "part_ft_shapes": "{shapes}{more}",
    "part_ft_more_shapes": "，另有 {count} 种",
    "ft_oft_block_divides": "{option} {value} 不能整除每个被适配层的输入宽度（宽度为 {widths}；不能整除的有 "
    "{bad}）：peft 会逐层改变它。请把 {option} 设为它们全部的公约数（{fits}），或缩小 oft_target 的范围。",
    "ft_pissa_not_kept": "pissa_convert：没有保留初始的 PiSSA 适配器（该模型不是由 tunekit 以 pissa_init 和 "
    "pissa_convert 构建的）；无法把适配器转换为普通 LoRA。",
    "prompt_adapter_not_last": "adapter_name_or_path：{path} 是 {kind} "
    "适配器，无法合并进权重，因此必须列在最后：请把它移到末尾，或删除它之后的适配器。",
    "ptuning_latent_attention": "finetuning_type ptuning 无法训练 {model_type}：它的多头潜在注意力为每个 token "
    "缓存一个压缩的潜在向量（kv_lora_rank {rank} 宽）和一个共享的旋转位置键（qk_rope_head_dim "
    "{rope}），而不是每个注意力头的键和值，因此 peft 的前缀（每个注意力头和每层 pre_seq_len "
    "个键和值）放不进它的缓存。请使用 finetuning_type prompt（num_virtual_tokens）或 lora。",
    "prompt_adapter_under": "adapter_name_or_path：{path} 是 {kind} 适配器，无法合并进权重以在其上训练 "
    "finetuning_type {method}：{fix}。",
    "part_prompt_continue": "请设置 finetuning_type: {method} 以继续训练它，或删除它",
    "part_remove_it": "请删除它",
    "prompt_adapter_other_kind": "adapter_name_or_path：{path} 是 {kind} 适配器，不是 finetuning_type "
    "{method}（{peft_type}）的适配器：请把 finetuning_type 设为 {target} 以继续训练它，或删除它。",
    "part_to_its_kind": "它对应的类型",
    "prompt_tokens_differ": "{option} {value} 与 adapter_name_or_path {path}（本次运行继续训练它）的 {tokens} 个虚拟 "
    "token 不同：请删除 {option}，或把它设为 {tokens}。",
    "gguf_prompt_adapter": "export_format: gguf 需要可转换的权重，但 {path} 是前缀/提示适配器（finetuning_type "
    "ptuning 或 prompt），它不改变任何权重，也无法合并进模型：请用 export_format: safetensors "
    "导出（适配器及其基座模型的引用）。",
    "gguf_multimodal": "export_format: gguf 只转换纯文本模型；{model} 是视觉语言或音频模型（{arch}），llama.cpp "
    "把它的视觉编码器放在单独的 `mmproj` 文件中，而 tunekit 不写该文件：请用 export_format: safetensors 导出。",
    "gguf_packages": "export_format: gguf 需要 `gguf` 和 `llama-cpp-python` 包（{error}）：`pip install "
    "'tunekit[gguf]'`。",
    "gguf_arch_unsupported": "export_format: gguf：llama.cpp 的转换器（`llama-cpp-python` {version}）没有架构 "
    "{arch}（{model}），因此无法写出该模型的 GGUF：请用 export_format: safetensors 导出。",
    "gguf_convert_failed": "llama.cpp 的 convert_hf_to_gguf.py 无法转换合并后的模型",
    "gguf_quantize_failed": "llama.cpp 无法把 {name} 量化为 {kind}",
    "gguf_runner_failed": "{failure}：\n{tail}",
    "metrics_packages": "预测指标需要 `jieba`、`nltk` 和 `rouge-chinese`（缺少 {name}）：`pip install "
    "'tunekit[metrics]'`。",
    "train_settings_invalid": "训练设置无效：{error}",
    "ckpt_no_prefix_encoder": "{path} 中没有 {file}，而 prefix_projection 运行要从它恢复前缀 MLP（其适配器只保存 MLP "
    "的输出）：请从 tunekit 写出的检查点恢复，或设置 adapter_name_or_path: {path} 开始新的运行（它会作为不带 MLP "
    "的普通前缀继续训练）。",
    "ckpt_disk_full": "保存{what}时设备空间不足；{intact}。请释放一些空间（或设置 save_total_limit），然后用 "
    "resume_from_checkpoint: auto 继续。",
    "part_ckpt_intact": "{name} 完好无损",
    "part_no_earlier_ckpt": "没有更早的检查点",
    "part_final_model_to": "最终模型（到 {path}）",
    "part_ckpt_to": " checkpoint-{step}（到 {path}）",
    "ds_not_installed": "deepspeed: {source} 需要 DeepSpeed 包，但它没有安装：`pip install 'tunekit[deepspeed]'`（或 "
    "`pip install deepspeed`），或删除 deepspeed 参数。",
    "ds_offload_no_compiler": "deepspeed: {source} 把优化器卸载到 CPU，这需要 DeepSpeed 的 CPU Adam "
    "算子；它在首次使用时编译，需要 `C++` 编译器（c++/g++）和 `ninja`，但这里没有找到。请安装它们（例如 `apt-get "
    "install build-essential; pip install ninja`），或使用不卸载的配置（z2、z3）。",
    "ds_cpu_no_compiler": "在 CPU 上运行的 deepspeed 会在首次使用时编译其共享内存通信算子，这需要 `C++` 编译器和 "
    "`ninja`，但这里没有找到：请安装它们（`apt-get install build-essential; pip install ninja`）。",
    "fp8_backend_unknown": "不支持 fp8_backend {backend}：请使用 fp8_backend: torchao（或 auto）或 te。",
    "fp8_no_te": "fp8_backend te 需要 NVIDIA Transformer Engine（在 `CUDA` 机器上 `pip install "
    "transformer-engine[pytorch]`），但它没有安装：请安装它，或使用 fp8_backend: torchao。",
    "fp8_no_torchao": "fp8 配合 fp8_backend torchao（或 auto）需要 `torchao`，但它没有安装：{install}（`fp8` "
    "附加依赖），或使用 fp8_backend: te，或删除 fp8。",
    "machine_fp16_no_gpu": "fp16 混合精度需要 GPU，而{where}；在 CPU 上请使用 fp32（默认）或 bf16。",
    "machine_fp8_no_gpu": "fp8 训练需要支持 FP8 的 NVIDIA GPU（Hopper 或更新），而{where}；请删除 fp8（在 CPU 上用 "
    "fp32 训练，即默认）。",
    "part_use_cpu_set": "已设置 use_cpu",
    "part_none_visible": "当前看不到任何 GPU",
    "machine_gpu_too_old": "{what} 需要计算能力 {minimum} 或更新的 GPU（{family}）；{name} 的计算能力为 "
    "{capability}：{fix}。",
    "part_fp8_training": "fp8 训练",
    "part_ampere_or_newer": "Ampere 或更新",
    "part_fix_fp8_bf16": "请删除 fp8 并使用 bf16: true",
    "part_fix_bf16_fp16": '请改用 fp16: true（若使用 DeepSpeed 配置文件，请禁用其中的 bf16 部分或设为 "auto"）',
    "optim_package_missing": "该优化器需要 {package} 包：`pip install -c constraints.txt '.[optimizers]'`（或 `pip "
    "install {package}`）。",
    "optim_targets_missing": "目标模块 {missing} 不是该模型的线性层（或包含线性层的模块）；线性层有：{available}（或 "
    "all）。",
    "optim_muon_no_weights": "use_muon 在解码器层中找不到可训练的二维权重：请训练它们（finetuning_type: full 或 "
    "freeze），或删除 use_muon。",
    "optim_galore_optim": "use_galore 只能配合 optim adamw_torch（或 adamw_8bit、`adafactor`）使用，不能配合 "
    "{optim}：请设置 optim: adamw_torch。",
    "optim_apollo_optim": "use_apollo 只能配合 optim adamw_torch 使用，不能配合 {optim}：请设置 optim: adamw_torch。",
    "optim_badam_ratio_clip": "`badam_mode: ratio` 更新的是稀疏梯度，torch 的梯度裁剪无法计算其范数：请设置 "
    "max_grad_norm: 0（或使用 `badam_mode: layer`）。",
    "tracker_not_installed": "report_to 包含 {name}，但没有安装 {package} 包：请 `pip install {package}`，或把 "
    "{name} 从 report_to 中删除{swanlab}。",
    "part_swanlab_off": " / 设置 use_swanlab: false",
    "tracker_wandb_login": "`wandb` 需要登录：请设置 WANDB_API_KEY（或运行 `wandb login`），或设置 "
    "`WANDB_MODE=offline` 在本地记录。",
    "tracker_swanlab_offline": "`swanlab_mode: cloud` 需要访问 {host} 的网络，但这台机器无法访问它。请使用 "
    "`swanlab_mode: local`（记录到磁盘，用 `swanlab watch` 查看），或删除 use_swanlab。",
    "tracker_swanlab_key": "`swanlab_mode: cloud` 需要 API 密钥：请设置 swanlab_api_key 或 SWANLAB_API_KEY（或运行 "
    "`swanlab login`），或使用 `swanlab_mode: local`。",
    "fsdp_no_distributed": "fsdp: {strategy} 需要 torch.distributed：请用 `tunekit train`（它会运行 "
    "`torchrun`）或你自己的启动器（`torchrun` / `accelerate launch`）启动。",
    "fsdp_wrap_classes_missing": "fsdp_transformer_layer_cls_to_wrap（或 fsdp_config 中的 "
    "transformer_layer_cls_to_wrap）指定的 {missing} 在 {name} "
    "中没有对应的模块（其解码器层类为：{own}）：请指定已加载模型中的类，或删除该参数以对其解码器层分片。",
    "part_none": "无",
    "fsdp_no_wrap_class": "fsdp：{name} 中没有类为 {classes} 的模块：请用 fsdp_transformer_layer_cls_to_wrap "
    "指定其解码器层类（例如 LlamaDecoderLayer）。",
    "fsdp_no_layer_class": "fsdp：{name} 没有声明解码器层类（_no_split_modules）：请用 "
    "fsdp_transformer_layer_cls_to_wrap 指定（例如 LlamaDecoderLayer）。",
    "fsdp_mixed_dtypes": "fsdp：同一层的可训练参数的数据类型不同（{dtypes}）；FSDP2 要求每层只有一种。请以 float32 "
    "加载模型（dtype: float32）；bf16: true 仍以 bf16 计算。",
    "fsdp_no_state": "检查点 {path} 中没有 {state}/（它不是由 fsdp 运行写出的，或设置了 save_only_model: "
    "true）：FSDP2 只能从它自己的检查点恢复。请不用 fsdp 恢复它，或从头开始。",
    "fsdp_checkpoint_sharded": "检查点 {path} 是由 fsdp 运行写出的：请用相同的 fsdp "
    "设置恢复它（它的优化器状态是分片的）。",
    "part_media_ranks_where": "{engine} 在 {ranks} 个进程上训练视觉语言模型：{total} 个{split}样本中有 {count} 个",
    "part_split_training": "训练",
    "part_split_evaluation": "评估",
    "media_ranks_sharded": "{where}没有图像、视频或音频。这些引擎只在微批次含有媒体的进程上收集视觉编码器的权重，因此"
    "各进程会互相等待。请给每个样本配上媒体，把纯文本样本放到单独的运行中训练，或使用 deepspeed: z2 "
    "并冻结视觉编码器和投影层（或 DDP / 单进程），它们在每个进程上都保留完整权重。",
    "media_ranks_tower_trains": "{where}没有图像、视频或音频，而视觉编码器或投影层在训练：没有媒体的进程对它们没有梯"
    "度，各进程的梯度归约将无法匹配。请给每个样本配上媒体，把 freeze_vision_tower 和 freeze_multi_modal_projector "
    "设为 true，或不用 deepspeed 训练（DDP）。",
    "launch_ray_options_alone": "{names}：LLaMA-Factory 的 `Ray Train` 参数只在环境中设置了 USE_RAY=1 时才会读取。"
    "请设置 USE_RAY=1 以在 `Ray` 集群上训练（见 docs/workflows/multi-gpu.md），或删除这些参数：没有 USE_RAY 时，"
    "`tunekit train` 会自己启动进程（`torchrun`）。",
    "launch_ray_with_torchrun": "USE_RAY=1 与 {name} 同时设置：`Ray Train` 会自己启动并放置进程（ray_num_workers、"
    "resources_per_worker、placement_strategy）；请取消设置 {name}。",
    "launch_ray_missing": "USE_RAY=1 需要 `Ray Train`，但它没有安装：请在 `Ray` 集群的每个节点上运行 "
    "`pip install 'tunekit[ray]'`（`ray[train]` 2.60.0）。",
    "launch_ray_resources": "ray_num_workers={workers}、每个进程 {per_worker}，共需要 {need} 个 {resource}，"
    "但 `Ray` 集群只有 {have} 个：请减小 ray_num_workers 或 resources_per_worker，或加入更大的集群（RAY_ADDRESS，"
    "或 ray_init_kwargs 中的 `address`）。",
    "cli_flag_needs_value": "{flag} 需要一个值。",
    "cli_flag_expects": "{flag} 需要{kind}，实际为 {value}。",
    "part_a_whole_number": "一个整数",
    "part_a_number": "一个数",
    "cli_data_unknown": "未知的 `tunekit data` 子命令 {command}：请使用 `tunekit data stats CONFIG.yaml`。",
    "cli_data_no_dataset": "没有配置数据集：请设置 dataset（dataset_info.json 中的名称或文件路径）。",
    "cli_verify_one_folder": "`tunekit verify` 只接受一个目录：`tunekit verify EXPORT_DIR [--json] [--strict]`。",
    "serve_bad_port": "{where} 必须是 1 到 65535 之间的端口号，实际为 {value}。",
    "serve_bad_body_mb": "{where} 必须是正的兆字节数（例如 4），实际为 {value}。",
    "new_tokens_untrained": "{count} 个新增特殊 token 的词嵌入行不会被 finetuning_type {method} 训练，"
    "会一直保持初始值：请同时训练输入与输出词嵌入（lora 或 oft 用 additional_target: embed_tokens,lm_head，freeze 用 "
    "freeze_extra_modules，按你的模型的模块名填写；LLaMA-Factory 会自动加入它们），或使用 finetuning_type full。",
}

# placeholder → how a tuple of values is joined in Chinese (the same placeholders as problem_texts_run.JOINS_RUN)
JOINS_ZH_RUN: dict[str, str | tuple[str, str]] = {"diffs": "；", "checkpoints": "；"}

# env.py's errors (:data:`tunekit.env.ENV_ENGLISH`, part of problem_texts.ENGLISH) in Chinese
ZH_ENV: dict[str, str] = {
    "env_not_whole_number": "环境变量 {name}={raw} 不是整数；请取消设置它，或让启动器（`torchrun`、deepspeed）"
    "来设置。",
    "env_nnodes_not_whole_number": "NNODES={raw} 不是整数。",
    "env_nnodes_below_one": "NNODES={value} 必须至少为 1。",
}
