"""The board's own words in English and Chinese (option names stay as written in YAML).

Option help comes from the schema: the field's description (English) and
:data:`tunekit.config.help_zh.HELP_ZH` (Chinese, one entry per option; ``tests/config/test_help_zh.py`` keeps it
complete).
"""

from __future__ import annotations

from tunekit.config.help_zh import help_zh
from tunekit.data.preview import MEDIA_RUN
from tunekit.plan.notes import ENGLISH, JOINS

from .problems_zh_plan import RUNG_JOINS_ZH, RUNGS_ZH

LANG_LABELS = {"en": "English", "zh": "中文"}

TEXT: dict[str, dict[str, str]] = {
    "title": {"en": "tunekit board", "zh": "tunekit 训练面板"},
    "subtitle": {
        "en": "Pick a model, data and options; see whether it fits; train; watch the loss; chat; export.",
        "zh": "选择模型、数据与参数；查看显存是否够用；训练；观察损失；对话；导出。",
    },
    "lang": {"en": "Language", "zh": "语言"},
    "tab_train": {"en": "Train", "zh": "训练"},
    "tab_eval": {"en": "Evaluate & predict", "zh": "评估与预测"},
    "tab_chat": {"en": "Chat", "zh": "对话"},
    "tab_export": {"en": "Export", "zh": "导出"},
    # sections of the train form (group titles come from the schema in English)
    "sec_model": {"en": "Model", "zh": "模型"},
    "sec_data": {"en": "Data", "zh": "数据"},
    "sec_method": {"en": "Stage and method", "zh": "训练阶段与方法"},
    "sec_lora": {"en": "LoRA", "zh": "LoRA 参数"},
    "sec_freeze": {"en": "Freeze", "zh": "冻结训练参数"},
    "sec_training": {"en": "Hyper-parameters", "zh": "超参数"},
    "sec_rlhf": {"en": "RLHF and preference", "zh": "RLHF 与偏好优化"},
    "sec_quantization": {"en": "Quantization", "zh": "量化"},
    "sec_acceleration": {"en": "Acceleration and RoPE", "zh": "加速与 RoPE"},
    "sec_distributed": {"en": "Distributed", "zh": "分布式"},
    "sec_logging": {"en": "Logging and output", "zh": "日志与输出"},
    "sec_export": {"en": "Export options", "zh": "导出参数"},
    "sec_optimizers": {
        "en": "Optimizers (GaLore, APOLLO, BAdam, Muon, Adam-mini)",
        "zh": "优化器（GaLore、APOLLO、BAdam、Muon、Adam-mini）",
    },
    "sec_multimodal": {"en": "Images, video and audio", "zh": "图像、视频与音频"},
    "sec_infer": {"en": "Generation", "zh": "生成参数"},
    # the Train tab's tutorial groups (webui/groups.py), LLaMA Board's words
    "sec_group_model": {"en": "Base model", "zh": "基座模型"},
    "sec_group_data": {"en": "Data", "zh": "数据"},
    "sec_group_stage": {"en": "Training stage", "zh": "训练阶段"},
    "sec_group_method": {"en": "Finetuning method", "zh": "微调方法"},
    "sec_group_quantization": {"en": "Quantization", "zh": "量化"},
    "sec_group_acceleration": {"en": "Acceleration", "zh": "加速方式"},
    "sec_group_rope": {"en": "RoPE scaling", "zh": "RoPE 插值"},
    "sec_group_general": {"en": "General training parameters", "zh": "常用训练参数"},
    "sec_group_other": {"en": "Other settings", "zh": "其它参数设置"},
    "sec_group_freeze": {"en": "Freeze tuning settings", "zh": "部分参数微调设置"},
    "sec_group_lora": {"en": "LoRA settings", "zh": "LoRA 参数设置"},
    "sec_group_rlhf": {"en": "RLHF settings", "zh": "RLHF 参数设置"},
    "sec_group_multimodal": {"en": "Multimodal settings", "zh": "多模态参数设置"},
    "sec_group_galore": {"en": "GaLore settings", "zh": "GaLore 参数设置"},
    "sec_group_apollo": {"en": "APOLLO settings", "zh": "APOLLO 参数设置"},
    "sec_group_badam": {"en": "BAdam settings", "zh": "BAdam 参数设置"},
    "sec_group_output": {"en": "Output and DeepSpeed", "zh": "输出与 DeepSpeed"},
    "sec_group_trackers": {"en": "Experiment tracking (SwanLab)", "zh": "实验记录（SwanLab）"},
    "advanced": {"en": "Advanced (every other option)", "zh": "高级（其余全部参数）"},
    # train tab
    "datasets_refresh": {"en": "Reload dataset_info.json", "zh": "重新读取 dataset_info.json"},
    "samples_n": {"en": "Samples", "zh": "样本数"},
    "samples_btn": {"en": "Preview samples", "zh": "预览样本"},
    "samples_out": {
        "en": "Rendered samples (highlighted: trained tokens)",
        "zh": "渲染后的样本（高亮：参与训练的 token）",
    },
    "samples_media": {"en": "Media of the previewed samples", "zh": "预览样本中的媒体"},
    "samples_piece_trained": {"en": "trained", "zh": "参与训练"},  # the preview's legend
    "samples_piece_media": {"en": "media", "zh": "媒体"},
    "samples_images": {"en": "images", "zh": "图像"},
    "samples_videos": {"en": "videos", "zh": "视频"},
    "samples_audios": {"en": "audios", "zh": "音频"},
    "samples_tokens": {"en": "media tokens", "zh": "媒体 token"},
    "samples_media_run": {"zh": "{media} × {n} 个 token"},  # a run of media tokens; English: data.preview.MEDIA_RUN
    "samples_outside": {
        "en": "outside the folders this board may use: not shown",
        "zh": "不在面板可访问的目录内：不显示",
    },
    "preview_btn": {"en": "Preview command", "zh": "预览命令"},
    "start_btn": {"en": "Start", "zh": "开始"},
    "stop_btn": {"en": "Stop", "zh": "停止"},
    "config_path": {"en": "Config file (YAML)", "zh": "配置文件（YAML）"},
    "save_btn": {"en": "Save YAML", "zh": "保存 YAML"},
    "overwrite": {"en": "Overwrite", "zh": "覆盖已有文件"},
    "config_saved": {"en": "✓ saved {path}", "zh": "✓ 已保存 {path}"},
    "config_loaded": {"en": "✓ loaded {path}", "zh": "✓ 已加载 {path}"},
    "model_loaded": {"en": "✓ loaded {model}", "zh": "✓ 已加载 {model}"},
    "model_load_failed": {"en": "could not load the model: {error}", "zh": "无法加载模型：{error}"},
    "preview_need": {
        "en": "set model_name_or_path, template and dataset to preview samples",
        "zh": "请先设置 model_name_or_path、template 和 dataset，才能预览样本",
    },
    "preview_unavailable": {
        "en": "sample preview is not available in this build ({error})",
        "zh": "此版本无法预览样本（{error}）",
    },
    "load_btn": {"en": "Load YAML", "zh": "读取 YAML"},
    "command": {"en": "Command", "zh": "命令"},
    "yaml": {"en": "YAML", "zh": "YAML"},
    "status": {"en": "Status", "zh": "状态"},
    "log": {"en": "Log", "zh": "日志"},
    "loss_plot": {"en": "Loss", "zh": "损失"},
    "loss_png": {"en": "training_loss.png", "zh": "training_loss.png"},
    "plan_title": {"en": "Memory plan", "zh": "显存规划"},
    "plan_gpu": {"en": "GPU", "zh": "GPU"},
    "plan_gpus": {"en": "GPUs", "zh": "GPU 数量"},
    "plan_btn": {"en": "Recompute plan", "zh": "重新计算"},
    "autofit_btn": {"en": "Auto-fit", "zh": "自动适配"},
    "plan_none": {"en": "The planner is not installed in this build.", "zh": "此版本未包含显存规划模块。"},
    "plan_no_gpu": {"en": "none / CPU (memory only)", "zh": "无 / CPU（只估算显存）"},
    "plan_need_model": {"en": "Set model_name_or_path to see the plan.", "zh": "请先填写 model_name_or_path。"},
    "invalid": {"en": "Fix these options first:", "zh": "请先修正以下参数："},
    "valid": {"en": "Options are valid.", "zh": "参数有效。"},
    "idle": {"en": "No job yet.", "zh": "尚无任务。"},
    # eval tab
    "eval_do_eval": {"en": "Evaluate (loss)", "zh": "评估（损失）"},
    "eval_do_predict": {"en": "Predict (generate and score)", "zh": "预测（生成并评分）"},
    "eval_output_dir": {"en": "Output folder for results", "zh": "结果输出目录"},
    "eval_btn": {"en": "Run", "zh": "运行"},
    "eval_results": {"en": "Results", "zh": "结果"},
    # chat tab
    "chat_model": {"en": "Model (base or exported)", "zh": "模型（基座或导出的模型）"},
    "chat_adapter": {"en": "Adapter (optional)", "zh": "适配器（可选）"},
    "chat_template": {"en": "Template", "zh": "模板"},
    "chat_load": {"en": "Load model", "zh": "加载模型"},
    "chat_unload": {"en": "Unload", "zh": "卸载"},
    "chat_system": {"en": "System prompt", "zh": "系统提示词"},
    "chat_input": {"en": "Message", "zh": "输入"},
    "chat_send": {"en": "Send", "zh": "发送"},
    "chat_clear": {"en": "Clear history", "zh": "清空历史"},
    "chat_box": {"en": "Chat", "zh": "对话"},
    "chat_info": {"en": "Model status", "zh": "模型状态"},
    "chat_image": {
        "en": "Image (goes with your next message; vision-language models)",
        "zh": "图像（随下一条消息发送；需视觉语言模型）",
    },
    "chat_need_model": {"en": "Load a model first (Load model).", "zh": "请先加载模型（“加载模型”）。"},
    "chat_image_text_only": {
        "en": "{name}: the loaded model is text-only (template '{template}') and cannot see images. Load a "
        "vision-language model with its multimodal template (e.g. qwen2_vl for Qwen2-VL / Qwen2.5-VL), or "
        "remove the image and send the text alone.",
        "zh": "{name}：已加载的是纯文本模型（模板 '{template}'），无法读取图像。请加载视觉语言模型并使用其多模态模板"
        "（如 Qwen2-VL / Qwen2.5-VL 用 qwen2_vl），或移除图像后只发送文本。",
    },
    "chat_image_too_large": {
        "en": "{name} is {size}, over the board's upload limit of {limit}: send a smaller image (downscale or "
        "compress it).",
        "zh": "{name} 大小为 {size}，超过面板的上传上限 {limit}：请发送更小的图像（缩小或压缩）。",
    },
    "chat_image_corrupt": {
        "en": "{name} cannot be read as an image (the file is corrupt or not an image): upload a PNG, JPEG or "
        "WebP file.",
        "zh": "{name} 无法作为图像读取（文件已损坏或不是图像）：请上传 PNG、JPEG 或 WebP 文件。",
    },
    "chat_image_missing": {
        "en": "{name}: the uploaded file is gone; upload it again.",
        "zh": "{name}：上传的文件已不存在，请重新上传。",
    },
    "chat_reply_failed": {"en": "the reply failed: {error}", "zh": "回复生成失败：{error}"},
    "chat_thought": {"en": "Thinking", "zh": "思考过程"},
    "chat_unloaded": {"en": "unloaded", "zh": "已卸载"},
    # export tab
    "export_model": {"en": "Base model", "zh": "基座模型"},
    "export_adapter": {"en": "Adapter(s) to merge", "zh": "要合并的适配器"},
    "export_btn": {"en": "Export", "zh": "导出"},
    "export_log": {"en": "Export log", "zh": "导出日志"},
    # --- Evaluate & predict, Chat and Export standing on their own (tabs/source.py, eval.py, export.py, jobs.py)
    "src_run_dir": {"en": "Run folder (its checkpoints)", "zh": "训练输出目录（检查点所在）"},
    "src_checkpoint": {"en": "Checkpoint", "zh": "检查点"},
    "src_refresh": {"en": "List checkpoints", "zh": "列出检查点"},
    "src_use_train": {"en": "Use the Train tab's", "zh": "使用训练页的设置"},
    "src_need_model": {
        "en": "Set the model (a local folder or a hub id), or click “Use the Train tab's”.",
        "zh": "请填写模型（本地目录或 Hub ID），或点击“使用训练页的设置”。",
    },
    "eval_nothing": {
        "en": "Tick “Evaluate” or “Predict”: there is nothing to run.",
        "zh": "请勾选“评估”或“预测”：当前没有可运行的内容。",
    },
    "loaded": {"en": "loaded", "zh": "已读取"},
    "export_quant": {"en": "Quantized export", "zh": "量化导出"},
    "export_needs": {"en": "needs", "zh": "需要安装"},
    "export_verify_btn": {"en": "Verify export_dir", "zh": "校验导出目录"},
    "export_need_dir": {"en": "Set export_dir: the folder to write.", "zh": "请填写 export_dir（导出目录）。"},
    # --- live feedback and first-run defaults (board.py, guard.py, defaults.py, tabs/train.py's progress block)
    "lr_plot": {"en": "Learning rate", "zh": "学习率"},
    "prog_step": {"en": "step", "zh": "步数"},
    "prog_epoch": {"en": "epoch", "zh": "轮数"},
    "prog_elapsed": {"en": "elapsed", "zh": "已用时"},
    "prog_eta": {"en": "ETA", "zh": "剩余时间"},
    "prog_loss": {"en": "loss", "zh": "损失"},
    "prog_series": {"en": "series", "zh": "曲线"},
    "prog_eval_loss": {"en": "eval_loss", "zh": "验证损失"},
    "state_running": {"en": "running", "zh": "运行中"},
    "state_stopping": {"en": "stopping", "zh": "正在停止"},
    "state_stopped": {"en": "stopped", "zh": "已停止"},
    "state_finished": {"en": "finished", "zh": "已完成"},
    "state_failed": {"en": "failed", "zh": "失败"},
    "job_exit": {"en": "exit {code}", "zh": "退出码 {code}"},  # a failed job's status line (monitor.failed_status)
    "job_failed_reason": {"en": "", "zh": "任务失败："},  # before the log's own (English) lines; none in English
    "plan_this_machine": {"en": "this machine ({name})", "zh": "本机（{name}）"},
    "plan_this_machine_cpu": {
        "en": "this machine (no known GPU: memory only)",
        "zh": "本机（未识别到 GPU：只估算显存）",
    },
    "first_run_every_step": {
        "en": "logging_steps is 1: the run has {steps} steps (fewer than {limit}), so every step is logged and "
        "plotted.",
        "zh": "logging_steps 设为 1：本次训练共 {steps} 步（少于 {limit} 步），因此每一步都记录并绘入损失曲线。",
    },
    "first_run_folder_taken": {
        "en": "{old} already holds a run: this one goes to {new}.",
        "zh": "{old} 中已有一次训练：本次改为输出到 {new}。",
    },
    "handler_failed": {
        "en": "This action could not be completed; the terminal running `tunekit webui` has the details.",
        "zh": "此操作未能完成；详情见运行 `tunekit webui` 的终端。",
    },
    "handler_failed_because": {"en": "This action could not be completed: {reason}", "zh": "此操作未能完成：{reason}"},
    # the model and data pickers (webui/pickers.py say())
    "pick_rows": {"en": "rows", "zh": "条"},
    "pick_chosen": {
        "en": "template {template} chosen from the model folder ({family} family)",
        "zh": "已根据模型目录选择模板 {template}（{family} 系列）",
    },
    "pick_kept": {
        "en": "template {current} kept; the model folder ({family} family) suggests {template}",
        "zh": "保留模板 {current}；模型目录（{family} 系列）建议使用 {template}",
    },
    "pick_own": {
        "en": "template jinja chosen: the model folder ships its own chat template",
        "zh": "已选择模板 jinja：模型目录自带对话模板",
    },
    "pick_start_off": {"en": "Start is off: {reason}", "zh": "暂不能开始：{reason}"},
    "pick_fix_options": {"en": "fix the options marked in red ({first})", "zh": "请先修正标红的参数（{first}）"},
    "pick_no_model": {"en": "no model chosen", "zh": "尚未选择模型"},
    "pick_no_dataset": {"en": "no dataset chosen", "zh": "尚未选择数据集"},
    "pick_unfit": {
        "en": "dataset {name} ({kinds}) does not fit stage {stage}, which trains on {need}",
        "zh": "数据集 {name}（{kinds}）不适用于 {stage} 阶段，该阶段需要{need}",
    },
    "pick_no_media": {
        "en": "dataset {name} has {media}, which this model does not take (a vision / audio model's template does)",
        "zh": "数据集 {name} 含有 {media}，当前模型不接受（需视觉 / 音频模型及其模板）",
    },
    "pick_broken": {"en": "dataset {name}: {error}", "zh": "数据集 {name}：{error}"},
    "pick_need_pairwise": {"en": "ranking data (chosen / rejected)", "zh": "偏好数据（chosen / rejected）"},
    "pick_need_kto": {"en": "kto-tagged data", "zh": "带 kto_tag 标签的数据"},
    "pick_need_pt": {"en": "texts or conversations", "zh": "文本或对话数据"},
    "pick_need_plain": {
        "en": "plain conversations (no ranking, no kto tags, no text corpora)",
        "zh": "普通对话数据（非偏好、无 kto 标签、非纯文本语料）",
    },
    # --- the memory-plan panel (webui/plan_panel.py): its lines, and the planner's notes said again (numbers,
    # option names, values and paths stay as they are)
    "plan_fits": {"en": "✓ fits", "zh": "✓ 显存够用"},
    "plan_does_not_fit": {"en": "✗ does not fit", "zh": "✗ 显存不足"},
    "plan_component": {"en": "component", "zh": "组成部分"},
    "plan_comp_base_weights": {"en": "base_weights", "zh": "基座权重"},
    "plan_comp_trainable_params": {"en": "trainable_params", "zh": "可训练参数"},
    "plan_comp_gradients": {"en": "gradients", "zh": "梯度"},
    "plan_comp_optimizer_states": {"en": "optimizer_states", "zh": "优化器状态"},
    "plan_comp_master_weights": {"en": "master_weights", "zh": "主权重（fp32 副本）"},
    "plan_comp_activations": {"en": "activations", "zh": "激活值"},
    "plan_comp_logits": {"en": "logits", "zh": "LM 头与损失"},
    "plan_comp_optimizer_step": {"en": "optimizer_step", "zh": "优化器更新（临时）"},
    "plan_comp_distributed_buffers": {"en": "distributed_buffers", "zh": "分布式缓冲区"},
    "plan_comp_fragmentation": {"en": "fragmentation", "zh": "内存碎片"},
    "plan_comp_overhead": {"en": "overhead", "zh": "运行时开销"},
    "plan_more_below": {"en": "{n} more below 0.01", "zh": "另有 {n} 项低于 0.01"},
    "plan_total_steps": {"en": "total_steps", "zh": "总步数"},
    "plan_steps_per_epoch": {"en": "steps_per_epoch", "zh": "每轮步数"},
    "plan_time": {"en": "time ≈ {time}", "zh": "预计用时 ≈ {time}"},
    "plan_trainable": {
        "en": "trainable {trainable} / {total} parameters",
        "zh": "可训练参数 {trainable} / 共 {total}",
    },
    "plan_autofit": {"en": "auto-fit:", "zh": "自动适配："},
    "plan_unavailable": {"en": "plan unavailable", "zh": "无法计算显存规划"},
    "plan_setup_optimizer_offload": {"en": "optimizer offload", "zh": "优化器卸载"},
    "plan_setup_param_offload": {"en": "param offload", "zh": "参数卸载"},
    "plan_setup_single_gpu": {"en": "single GPU", "zh": "单 GPU"},
    "plan_setup_offload": {"en": "offload", "zh": "卸载"},
    "plan_setup_autocast": {"en": "autocast", "zh": "自动混合精度"},
    # The planner's notes, said again from their keys and values: "plan_" + the note key (its English is the
    # planner's template, plan/notes.py ENGLISH, filled in below), the same placeholders and format specs.
    "plan_note_no_data": {"zh": "数据未测量（{why}）；传入 `--num-samples N` 可规划步数。"},
    "plan_why_no_dataset": {"zh": "未选择数据集"},
    "plan_why_error": {"zh": "读取出错：{error}"},
    "plan_note_eval_separate": {"zh": "eval_dataset 是单独的数据集：其样本数不计入 train_samples。"},
    "plan_note_rounding": {
        "zh": "旧版 transformers 将每轮步数向下取整（已发布教程中 2876 个样本为 456 步）；transformers 5 "
        "在最后一个不完整的梯度累积窗口也更新一步，`tunekit train` 同样如此。向下取整时每轮为 {floor} 步。",
    },
    "plan_note_packing": {"zh": "packing：{samples} 个样本拼接成约 {seqs} 条 {tokens} 个 token 的序列。"},
    "plan_note_budget_unmeasured": {
        "zh": "max_tokens_per_batch：数据未测量，步数按 per_device_train_batch_size 的批次规划；数据集在磁盘上可测量时"
        "才能按 token 预算规划批次。",
    },
    "plan_note_budget": {
        "zh": "max_tokens_per_batch {budget}：{rows:,} 行训练数据每轮组成 {batches:,} 个微批次"
        "（每个优化步的样本数不固定；不使用 per_device_train_batch_size）。",
    },
    "plan_note_budget_oversized": {
        "zh": "max_tokens_per_batch：有 {n} 个样本填充到 {multiple} 的倍数后单独就超出预算；每个单独成为一个微批次。",
    },
    "plan_note_nothing_fits": {
        "zh": "{gpu} 上任何配置都放不下：最省显存的配置（{rung}）比可用的 {gib:g} GiB x {share:.2f} 还多需 "
        "{missing:.1f} GiB{gpus}。",
    },
    "plan_tail_gpus": {"zh": "，或改用 {n} 张 GPU 并开启 ZeRO-3"},
    "plan_note_ckpt_planned_on": {
        "zh": "gradient_checkpointing auto：按开启规划；不开启也放得下时 `tunekit train` 会关闭它"
        "（选择 GPU 可看到这一决定）。",
    },
    "plan_note_ckpt": {"zh": "梯度检查点：{state}（auto：{reasons}）"},
    "plan_join_reasons": {"zh": "；"},
    "plan_ckpt_on": {"zh": "开启"},
    "plan_ckpt_off": {"zh": "关闭"},
    "plan_ckpt_lowest": {"zh": "仅对最底部 {k} 层开启（共 {n} 层）"},
    "plan_reason_within": {"zh": "不开启时每个设备需 {need:.2f} GiB，在 {have:.1f} GiB（{device}）以内"},
    "plan_reason_force": {"zh": "设 gradient_checkpointing: true 可强制开启"},
    "plan_reason_over": {"zh": "不开启时每个设备需 {need:.2f} GiB，超过 {have:.1f} GiB（{device}）"},
    "plan_reason_lowest": {"zh": "只对最底部 {k} 层做检查点时需 {gib:.2f} GiB"},
    "plan_reason_standard": {
        "zh": "不开启时需 {need:.2f} GiB，超过标准做法（每层都做检查点、完整 logits）的 {target:.2f} GiB",
    },
    "plan_reason_standard_lowest": {"zh": "对最底部 {k} 层做检查点可降到 {gib:.2f} GiB，约多花单步时间的 {share:.0%}"},
    "plan_reason_rows": {"zh": "按每行 {tokens} 个 token 规划（{source}）"},
    "plan_reason_budget": {"zh": "按 max_tokens_per_batch {budget} 规划"},
    "plan_device_gpu": {"zh": "{gpu} 的 {gib:.0f} GiB 的 {share:.0%}"},
    "plan_device_ram": {"zh": "{gib:.0f} GiB 内存的 {share:.0%}{procs}"},
    "plan_tail_procs": {"zh": "，由 {n} 个进程分摊"},
    "plan_source_seq_len": {"zh": "按 --seq-len"},
    "plan_source_cutoff": {"zh": "按 cutoff_len"},
    "plan_source_padded": {"zh": "实测最长一行，含填充"},
    "plan_source_padding_free": {"zh": "实测最长一行，无填充"},
    "plan_source_generation": {"zh": "{source} + generation_max_new_tokens"},
    "plan_source_virtual": {"zh": "{source} + num_virtual_tokens"},
    "plan_note_cpu_heap": {
        "zh": "在 CPU 上：内存碎片为 {gib:.2f} GiB，是堆保护余量的两倍（`glibc` 保留已释放张量的常驻内存；"
        "host/heap.py 会回收，见 docs/memory-model.md 第 3.8 节）。",
    },
    "plan_note_cpu_share": {
        "zh": "在 CPU 上：内存碎片按随 token 数增长的内存的 {share:.0%} 计"
        "（已释放的张量留在 `glibc` 堆中，仍占常驻内存，为实测值，见 docs/memory-model.md 第 3.7 节）。",
    },
    "plan_note_moe": {
        "zh": "{model} 是混合专家模型：路由器、路由后的 token 行、LoRA 适配后的专家权重以及辅助损失保留的路由 "
        "softmax 按 transformers 的 grouped_mm 专家实现估算，每层按其实际结构（稠密或稀疏）计算"
        "（docs/memory-model.md 3.1）；专家并行未计入。"
    },
    "plan_note_ref_model": {
        "zh": "{stage} 阶段：需保留一个冻结的参考模型（按本模型大小计入 base_weights；"
        "使用 LoRA 时由去掉适配器的策略模型充当，无需副本；precompute_ref_log_probs 会在训练前释放它）。",
    },
    "plan_note_pairs": {
        "zh": "{stage} 阶段：`chosen` 与 `rejected` 一起前向计算：激活值按每个微批次 {seqs} 条序列计（微批次大小 "
        "{batch}）。",
    },
    "plan_note_tower": {
        "zh": "{family}：未对其{tower}编码器的激活值建模（其权重与可训练参数已计入；其媒体 token 计入序列{fixed}）。",
    },
    "plan_tower_audio": {"zh": "音频"},
    "plan_tower_vision": {"zh": "视觉"},
    "plan_tail_fixed": {"zh": "，无实测数据时每张图像按 {n} 个计"},
    "plan_note_media_cut": {
        "zh": "媒体：每个样本仅媒体 token 就有 {tokens} 个，超过 cutoff_len {cutoff}："
        "`tunekit train` 会丢弃这类样本（图像不会被截断）并列出它们；请增大 cutoff_len 或减小 image_max_pixels。",
    },
}
TEXT["samples_media_run"]["en"] = MEDIA_RUN
for _key, _zh in RUNGS_ZH.items():  # an auto-fit set-up's parts: one Chinese, the problems' (problems_zh_plan.py)
    TEXT[f"plan_{_key}"] = {"zh": _zh}
for _name, _zh in RUNG_JOINS_ZH.items():
    TEXT[f"plan_join_{_name}"] = {"zh": _zh}
for _key, _english in ENGLISH.items():  # one English template per note key: the planner's
    TEXT.setdefault(f"plan_{_key}", {})["en"] = _english
for _name, _english in JOINS.items():
    TEXT.setdefault(f"plan_join_{_name}", {})["en"] = _english


def t(key: str, lang: str) -> str:
    entry = TEXT.get(key)
    if entry is None:
        return key
    return entry.get(lang) or entry["en"]


def field_help(name: str, english: str, lang: str) -> str:
    """An option's help: its schema description, or in Chinese :data:`tunekit.config.help_zh.HELP_ZH`."""
    if lang == "zh":
        return help_zh(name) or english
    return english
