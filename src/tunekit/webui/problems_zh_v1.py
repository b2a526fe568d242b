"""A LLaMA-Factory v1 config's refusals in Chinese: one template per key of
:data:`tunekit.config.problem_texts_v1.ENGLISH_V1`, with the same placeholders (part of ``problems_zh.ZH``;
``tests/webui/test_problems_zh.py`` holds every key to one). Option names, values, paths and code stay as they are."""

from __future__ import annotations

ZH_V1: dict[str, str] = {
    "v1_refused": "LLaMA-Factory v1 的 `{key}: {value}`（{path} 中）：{why}。",
    "v1_unknown_key": "未知的键 `{key}`（{path} 中）：LLaMA-Factory v1 的 {name} 只接受 {words}。",
    "part_v1_expected_one_of": "应为 {words} 之一",
    "part_v1_block": "插件块是一个带 `name` 的映射（`name: ...`）",
    "part_v1_cast_fp32": "tunekit 在混合精度下把训练的权重保持为 float32；要用 bfloat16 训练，请在命令行写 "
    "pure_bf16=true，并删除这个键",
    "part_v1_peft_names": "tunekit 只读取 v1 的 lora 和 freeze",
    "part_v1_dcp_path": "tunekit 从模型的 Hugging Face 目录（`model`）加载模型，而不是从 torch.distributed "
    "检查点加载：请删除 dcp_path",
    "part_v1_ds_config_file": "DeepSpeed 需要它的 JSON 文件",
    "part_v1_fsdpturbo": "tunekit 没有 `fsdpturbo` 的专家并行（ep_size {ep_size}：每个进程持有一部分专家）；请把 "
    "dist_config 的 `name` 设为 fsdp2（FSDP2 把专家与其他权重一起分片）或 deepspeed",
    "part_v1_dist_names": "tunekit 只读取 v1 的 fsdp2 和 deepspeed",
    "part_v1_kernel_missing": "tunekit 没有{kernels}：请删除它",
    "part_v1_kernel_fla": " `flash-linear-attention` 为线性注意力层（Qwen3.5 / Qwen3-Next）提供的计算核",
    "part_v1_kernel_fused_moe": "融合的混合专家（MoE）GPU 计算核",
    "part_v1_kernel_npu": " Ascend NPU 计算核",
    "part_v1_kernel_unknown": "不是 tunekit 认识的 v1 计算核（auto、liger_kernel）",
    "part_v1_quant_names": "tunekit 只读取 v1 的 bnb 和 auto（bitsandbytes）",
    "part_v1_compute_dtype": "tunekit 按本次运行的精度计算（bf16 / fp16 / fp32，按设备选择或由 bf16 指定）：请删除 "
    "compute_dtype",
    "part_v1_init_names": "应为 init_on_meta、init_on_rank0 或 init_on_default",
    "part_v1_optim_names": "tunekit 只读取 v1 的 `muon`（其他优化器用 optim）",
    "part_v1_two_numbers": "应为两个数字",
    "part_v1_muon_fixed": "tunekit 的 Muon 固定使用 {key} {fixed}",
    "part_v1_scheduler": "tunekit 的学习率调度是 lr_scheduler_type（linear、cosine 等）加 warmup_steps：请删除这个块，"
    "并在命令行中给出它们",
    "v1_unknown_option": "未知的 LLaMA-Factory v1 参数 '{key}'（{path} 中；因为它含有 {marks}，按 v1 配置读取）。"
    "{hint}{own}",
    "part_v1_own_option": "v1 配置只接受 v1 的参数名：请在命令行中给出 tunekit 的 {key}（`{key}=VALUE`）。",
    "part_v1_save_epochs": "tunekit 每轮保存一次（save_epochs: 1）或每 N 步保存一次：请用 save_steps（每轮的步数见 "
    "`tunekit plan`）",
    "part_v1_dp_size": "tunekit 把全部 {world} 个进程（{how}）{groups}作为一个数据并行组运行，并在所有进程上分片："
    "请删除 {key}",
    "part_v1_cp_groups": "（每个由 cp_size {cp} 个进程组成的序列组算作一个）",
    "part_v1_how_world_size": "WORLD_SIZE",
    "part_v1_how_nproc": "`NPROC_PER_NODE x NNODES`",
    "part_v1_how_one": "单个进程（没有设置 WORLD_SIZE 或 NPROC_PER_NODE）",
    "part_v1_mp_replicate": "tunekit 没有混合分片（分片在多组进程间复制）：请删除 mp_replicate_size（FSDP 在所有进程"
    "上分片）",
    "part_v1_model_class": "tunekit 训练因果语言模型（`model_class: llm`）；要训练奖励模型，请在命令行中写 stage=rm",
    "part_v1_full_determinism": "tunekit 没有完全确定性开关（确定性计算核）：请删除它；运行的随机性由 seed 固定",
    "part_v1_ld_alpha": "tunekit 没有长度去偏 DPO（ld_alpha）的长度加权：请删除它",
    "part_v1_custom_chat_template": "tunekit 用具名模板或模型自带的模板渲染（`template: jinja`）：请把模板文本写进"
    "分词器的 chat_template，或在命令行中指定一个模板（`tunekit templates`）",
    "part_v1_whole_number": "应为整数",
    "part_v1_processes": "micro_batch_size {micro} x {world} 个数据并行进程（{how}）",
    "part_v1_global_multiple": "它必须是 {processes} = {product} 的倍数，与 v1 相同",
    "part_v1_expected_path": "应为路径（文本）",
    "part_v1_list_missing": "{cwd} 中没有这个文件（v1 从当前目录读取它，否则会从 Hugging Face 下载）；tunekit "
    "只读取本地的数据集列表：请在它相对的目录中运行，或先下载它",
    "part_v1_hub_dataset": "在 {cwd} 中既不是文件也不是目录，因此 v1 会读取 Hugging Face 上的数据集；tunekit 只读取"
    "在 dataset_info.json 中登记（hf_hub_url）的 Hugging Face 数据集：请登记它并在命令行中写 `dataset=NAME`，"
    "或先下载它",
    "part_v1_unreadable": "无法读取（{error}）",
    "part_v1_list_form": "v1 数据集列表把名称映射到 `{{path, source, ...}}`",
    "part_v1_draws_differ": "它对 {path} 的抽样是 {draw}，而另一个数据集列表是 {other}；tunekit 按文件命名数据集，"
    "所以一个文件只能有一种 `size` / `weight`",
    "v1_list_entry": "LLaMA-Factory v1 数据集列表 `{key}: {file}` 的条目 '{name}'（{path} 中）：{problem}。",
    "part_v1_entry_size": "`size`: {size} 必须是至少为 1 的整数样本数（删除它则每条记录读一次）",
    "part_v1_entry_weight": "`weight`: {weight} 必须是大于 0 的数（删除它则每条记录读一次）",
    "part_v1_entry_twice": "前面的条目也读取了路径 {entry}；tunekit 按文件命名数据集，所以一个文件只能有一种 `size` / "
    "`weight`：请合并这些条目",
    "part_v1_entry_needs_path": "需要 `path`：一个文件或目录",
    "part_v1_entry_keys": "未知的键 {wrong}；v1 只读取 {allowed}",
    "part_v1_entry_hub": "`source` {source}（{entry}）是 Hugging Face 上的数据集；tunekit 只读取在 "
    "dataset_info.json 中登记（hf_hub_url）的 Hugging Face 数据集：请登记它并在命令行中写 `dataset=NAME`，或先下载它",
    "part_v1_entry_missing": "路径 {entry} 在 {cwd} 中不存在（v1 从当前目录读取它）",
    "part_v1_entry_split": "`split` {split}：本地文件整体读取（它唯一的划分是 `train`）；请删除 `split`",
    "part_v1_entry_converter": "`converter` {converter}：对于用 `path` 给出的文件，tunekit 识别 `alpaca`、`sharegpt` "
    "和 v1 的消息记录；请改为在 dataset_info.json 中登记该文件及其列",
    "part_v1_entry_streaming": "`streaming: true`；tunekit 整体读取数据集：请删除 `streaming`",
}

# placeholder → how a tuple of values is joined in Chinese (the same placeholders as problem_texts_v1.JOINS_V1)
JOINS_ZH_V1: dict[str, str | tuple[str, str]] = {"marks": "、"}
