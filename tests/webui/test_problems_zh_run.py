"""A training, export or config-reading job's errors said in Chinese on the board (``config/problem_texts_run.py``,
``webui/problems_zh_run.py``): the model loader, the run, resuming, the stages, the launcher, the engines, the
exporters and the config readers raise them keyed, so a failed job's reason is Chinese on the board; the English the
CLI prints is unchanged word for word."""

from __future__ import annotations

import re
import string

import pytest
import yaml

from tests.helpers import ROOT, failed_job
from tests.zh_words import HAN, option_words, said_in_both, unkeyed_messages, untranslated, value_words
from tunekit.config.problem_texts import ENGLISH
from tunekit.config.problem_texts_run import ENGLISH_RUN
from tunekit.config.problems import Said
from tunekit.errors import ConfigError, EnvironmentProblem, ModelError
from tunekit.model.finetuning import check_lora_rank, check_oft_blocks
from tunekit.plan.gpus import find_gpu, known_gpus
from tunekit.webui.problems_zh import say_error

ALLOWED = option_words()
SRC = ROOT / "src" / "tunekit"
KEYED_MODULES = (
    "model/loader.py",
    "model/expand.py",
    "train/run.py",
    "train/resume.py",
    "train/preflight.py",
    *(f"train/stages/{p.name}" for p in sorted((SRC / "train" / "stages").glob("*.py"))),
    "train/engines/launcher.py",
    "train/engines/distributed.py",
    "export/exporter.py",
    "export/zero.py",
    "export/gptq_export.py",
    "export/gptq_check.py",
    "config/files.py",
    "config/loader.py",
    # the last user errors outside data/ (issue 31, item 6)
    "model/finetuning.py",
    "model/prompt_adapters.py",
    "export/gguf_export.py",
    "infer/metrics.py",
    *(f"train/{p.name}" for p in sorted((SRC / "train").glob("*.py"))),
    *(f"train/engines/{p.name}" for p in sorted((SRC / "train" / "engines").glob("*.py"))),
    "plan/architectures.py",
    "plan/gpus.py",
    "plan/optimizer_states.py",
    "plan/planner.py",
    "plan/vision.py",
    "config/options/data.py",
    "config/options/facts.py",
    "cli/args.py",
    "cli/train_cmd.py",
    "cli/export_cmd.py",
    "cli/verify_cmd.py",
    "cli/data_cmd.py",
    "cli/plan_cmd.py",
    "serve/server.py",
    # the last English values inside Chinese job lines (checkpoints: train/*.py above)
    "env.py",
)
# pieces that are only punctuation around their values in Chinese
NO_WORDS = {"part_weights_both", "part_resume_torn", "gguf_runner_failed", "part_ckpt_passed", "part_ft_shapes"}


def test_the_run_modules_raise_their_user_errors_keyed():
    """A user error raised with a literal or f-string message could not be said in Chinese: each is raised with a
    :class:`Said` (or through ``config_error``), whose key has an English template."""
    found = {name: unkeyed_messages(SRC / name, ENGLISH) for name in KEYED_MODULES}
    assert {name: lines for name, lines in found.items() if lines != ([], [])} == {}


@pytest.mark.parametrize("key", sorted(ENGLISH_RUN))
def test_every_run_template_is_chinese(key):
    """Every key, its placeholders filled with a number, has no untranslated English (code, option names,
    environment variables and values stay as they are); a sentence has Chinese words."""
    from tunekit.webui.problems_zh import ZH

    names = {name for _t, name, _s, _c in string.Formatter().parse(ZH[key]) if name}
    text = ZH[key].format(**dict.fromkeys(names, 1))
    assert untranslated(text, ALLOWED) == [], (key, text)
    assert HAN.search(text) or key in NO_WORDS, (key, text)


def test_a_nested_piece_and_a_list_are_said_in_chinese():
    """The pieces that vary in words (a token count, the weights that are missing and dropped) are said in Chinese,
    a list of names joined the Chinese way; the English is the sentence the loader always printed."""
    parts = Said(
        "part_weights_both",
        missing=Said("part_weights_missing", count=2, names=("a.weight", "b.weight")),
        unexpected=Said("part_weights_unexpected", count=1, names=("c.bias",)),
    )
    err = ModelError(Said("model_weights_mismatch", path="/m", architecture="Qwen2ForCausalLM", parts=parts))
    assert str(err) == (
        "the weights in /m do not belong to its config.json's architecture (Qwen2ForCausalLM): 2 weights it needs are "
        "missing and would start random (e.g. a.weight, b.weight); 1 weights in the folder have no place in it and "
        "would be dropped (e.g. c.bias). Check that config.json and the weight files come from the same model, or set "
        "allow_new_weights: true if the difference is intended."
    )
    assert say_error(err, "zh") == (
        "/m 中的权重不属于其 config.json 的架构（Qwen2ForCausalLM）：缺少 2 个它需要的权重，它们会随机初始化（例如 "
        "a.weight、b.weight）；目录中有 1 个权重在该架构中没有位置，会被丢弃（例如 c.bias）。请确认 config.json 和权重"
        "文件来自同一个模型；如果这种差异是有意的，请设置 allow_new_weights: true。"
    )


def test_a_missing_model_folder_fails_a_job_with_a_chinese_reason(tmp_path, monkeypatch, capsys):
    """The board's route end to end: ``tunekit train`` with a model folder that does not exist prints the English as
    before and writes the keyed error to ``$TUNEKIT_ERROR_FILE``; the board's line (:func:`say_job_error`) is
    Chinese, the path and the option name as they are."""
    missing = tmp_path / "no-such-model"
    monkeypatch.chdir(tmp_path)
    argv = ["train", f"model_name_or_path={missing}", "template=qwen", "dataset=toy", f"output_dir={tmp_path / 'out'}"]
    line, written, zh = failed_job(argv, tmp_path, monkeypatch, capsys)
    english = (
        f"Model folder {missing} does not exist (model_name_or_path). Check the path, or use a hub id like "
        "Qwen/Qwen2.5-0.5B."
    )
    assert line == f"error: {english}"
    assert written == [
        {"key": "model_folder_missing", "values": {"path": str(missing), "option": "model_name_or_path"}}
    ]
    assert (
        zh == f"模型目录 {missing} 不存在（model_name_or_path）。请检查路径，或使用 Qwen/Qwen2.5-0.5B 这样的模型 ID。"
    )
    said = Said("model_folder_missing", path=str(missing), option="model_name_or_path")
    assert said == english and untranslated(zh, ALLOWED | value_words(said)) == [], zh


def test_a_missing_config_file_fails_a_job_with_a_chinese_reason(tmp_path, monkeypatch, capsys):
    """The config reader's error takes the same route: English on stderr, Chinese on the board."""
    config = tmp_path / "run.yaml"
    line, _written, zh = failed_job(["train", str(config)], tmp_path, monkeypatch, capsys)
    assert (line, zh) == (f"error: Config file {config} does not exist.", f"配置文件 {config} 不存在。")


def test_a_method_refused_by_the_model_is_said_in_chinese():
    """``model/finetuning.py``'s refusal of an OFT block size that does not divide the layers' widths: the English
    word for word, the option it concerns for the board, and Chinese with no English left but names and values."""
    with pytest.raises(ConfigError) as err:
        check_oft_blocks(0, 48, [64, 256, 64])
    assert str(err.value) == (
        "oft_block_size 48 does not divide the input width of every adapted layer (widths 64, 256; not 64, 256): "
        "peft would change it layer by layer. Set oft_block_size to a divisor of all of them (1, 2, 4, 8, 16, 32, "
        "64), or narrow oft_target."
    )
    assert err.value.problems[0].fields == ("oft_block_size", "oft_target")
    zh = say_error(err.value, "zh")
    assert zh == (
        "oft_block_size 48 不能整除每个被适配层的输入宽度（宽度为 64, 256；不能整除的有 64, 256）：peft 会逐层改变它。"
        "请把 oft_block_size 设为它们全部的公约数（1, 2, 4, 8, 16, 32, 64），或缩小 oft_target 的范围。"
    )
    assert untranslated(zh, ALLOWED) == [], zh


def test_a_planner_refusal_is_said_in_chinese():
    """The planner's unknown ``--gpu``: the English as ``tunekit plan`` always printed it, the list of GPUs joined the
    Chinese way on the board."""
    with pytest.raises(ConfigError) as err:
        find_gpu("no-such-gpu")
    known = known_gpus()
    said_in_both(
        err.value,
        f"Unknown GPU 'no-such-gpu'. Known GPUs: {', '.join(known)}; or give its memory with --gpu-memory GiB.",
        f"未知的 GPU 'no-such-gpu'。已知的 GPU：{'、'.join(known)}；或用 `--gpu-memory GiB` 给出它的显存。",
    )


def test_a_data_command_without_a_dataset_fails_a_job_with_a_chinese_reason(tmp_path, monkeypatch, capsys):
    """``tunekit data stats`` with no dataset: English on stderr, the keyed error in the error file, Chinese on the
    board."""
    config = tmp_path / "run.yaml"
    config.write_text(f"model_name_or_path: {tmp_path / 'model'}\ntemplate: qwen\n", encoding="utf-8")
    line, written, zh = failed_job(["data", "stats", str(config)], tmp_path, monkeypatch, capsys)
    assert line == "error: No dataset configured: set dataset (names from dataset_info.json or file paths)."
    assert written == [{"key": "cli_data_no_dataset", "values": {}}]
    assert zh == "没有配置数据集：请设置 dataset（dataset_info.json 中的名称或文件路径）。"


def test_rays_launch_refusal_is_said_in_chinese():
    """Ray's options without USE_RAY=1 (train/engines/ray_launch.py): keyed, with the options' names as they are."""
    from tunekit.config import build_config
    from tunekit.train.engines.ray_launch import check_ray_env

    with pytest.raises(ConfigError) as err:
        check_ray_env(build_config({"model_name_or_path": "m", "output_dir": "o", "ray_num_workers": 2}), {})
    zh = say_error(err.value, "zh")
    assert zh.startswith(
        "ray_num_workers：LLaMA-Factory 的 `Ray Train` 参数只在环境中设置了 USE_RAY=1 时才会读取。"
    ), zh
    assert untranslated(zh, ALLOWED) == [], zh


# ---------------------------------------------------------------- the last English values inside Chinese job lines
def test_a_resume_with_another_learning_rate_fails_a_job_with_a_chinese_reason(
    tiny_qwen, tmp_path, monkeypatch, capsys
):
    """A tiny run trains to its end; ``tunekit train`` again with resume_from_checkpoint and other training options is
    refused: the English as before, the option differences keyed one by one in the error file and said in Chinese
    (joined with "；"), so no English is left on the board but the option names and values."""
    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.cli.verbs import dispatch

    data, out, config = tmp_path / "data", tmp_path / "out", tmp_path / "run.yaml"
    write_dataset(data, "toy", alpaca_records(4))
    config.write_text(yaml.safe_dump(base_config(tiny_qwen, data, out, max_steps=1)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert dispatch(["train", str(config)]) == 0
    capsys.readouterr()
    argv = ["train", str(config), "learning_rate=0.002", "max_steps=2", "resume_from_checkpoint=true"]
    line, written, zh = failed_job(argv, tmp_path, monkeypatch, capsys)
    saved = out / "tunekit_config.yaml"
    assert line == (
        f"error: the finished run in {out} belongs to a run with other training options ({saved}): learning_rate: "
        "0.001 there, 0.002 here; max_steps: 1 there, 2 here. Continuing it with this config would mix two runs. Use "
        "that run's values, or start a new run (another output_dir, or overwrite_output_dir: true without "
        "resume_from_checkpoint)."
    )
    assert written[0]["values"]["diffs"] == [
        {"key": "part_resume_diff", "values": {"key": "learning_rate", "there": "0.001", "here": "0.002"}},
        {"key": "part_resume_diff", "values": {"key": "max_steps", "there": "1", "here": "2"}},
    ]
    assert zh == (
        f"{out} 中已完成的训练 属于一次训练参数不同的运行（{saved}）：learning_rate：原运行为 0.001，本次为 0.002；"
        "max_steps：原运行为 1，本次为 2。用当前配置继续会把两次训练混在一起。请使用那次运行的参数值，或开始新的训练"
        "（换一个 output_dir，或设置 overwrite_output_dir: true 且不设置 resume_from_checkpoint）。"
    )
    assert untranslated(zh, ALLOWED | {str(out), str(saved)}) == [], zh


def test_torn_and_damaged_checkpoints_are_said_in_chinese(tmp_path):
    """Why each checkpoint cannot be resumed (no completion marker, a file cut short) is keyed: the list of torn
    checkpoints of ``resume_from_checkpoint: true`` and a named damaged checkpoint are Chinese on the board."""
    from tunekit.train.checkpoints import MARKER, write_complete_marker
    from tunekit.train.resume import plan_resume

    out = tmp_path / "out"
    for step in (2, 4):
        (out / f"checkpoint-{step}").mkdir(parents=True)
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text("{}", encoding="utf-8")
    write_complete_marker(out / "checkpoint-2", 2)
    (out / "checkpoint-2" / "trainer_state.json").write_text("{}\n", encoding="utf-8")  # 3 bytes, 2 when marked
    with pytest.raises(ConfigError) as err:
        plan_resume(out, True)
    said_in_both(
        err.value,
        f"resume_from_checkpoint: true found no complete checkpoint in {out} (checkpoint-4 (it has no {MARKER} (the "
        "run was probably killed while saving it)); checkpoint-2 (trainer_state.json has 3 bytes, 2 when it was "
        "saved)). Remove resume_from_checkpoint to start from scratch, or use resume_from_checkpoint: auto.",
        f"resume_from_checkpoint: true 在 {out} 中没有找到完整的检查点（checkpoint-4（它没有 {MARKER}（运行可能在保存"
        "它时被终止了））；checkpoint-2（trainer_state.json 有 3 字节，保存时为 2 字节））。删除 "
        "resume_from_checkpoint 可从头开始，或使用 resume_from_checkpoint: auto。",
    )
    (out / "checkpoint-2" / "trainer_state.json").write_text("[]", encoding="utf-8")  # same size, other bytes
    with pytest.raises(ConfigError) as err:
        plan_resume(out, str(out / "checkpoint-2"))
    said_in_both(
        err.value,
        f"checkpoint {out / 'checkpoint-2'} is incomplete or damaged: trainer_state.json does not match its checksum "
        f"in {MARKER} (its content changed after the save).",
        f"检查点 {out / 'checkpoint-2'} 不完整或已损坏：trainer_state.json 与 {MARKER} 中记录的校验和不符（保存后内容"
        "被改动过）。",
    )


def test_the_tail_of_a_long_list_of_lora_widths_is_said_in_chinese():
    """More than 8 layer shapes: the first 8 and how many more, the tail in Chinese too."""
    with pytest.raises(ConfigError) as err:
        check_lora_rank(128, {f"layer{i}": (64 * i, 64) for i in range(1, 12)})
    shapes = "64x64, 128x64, 192x64, 256x64, 320x64, 384x64, 448x64, 512x64"
    said_in_both(
        err.value,
        "lora_rank 128 is larger than any adapted layer can use: a LoRA update of a d_in x d_out layer has rank at "
        f"most min(d_in, d_out), and the adapted layers are {shapes} and 3 more (in x out); set lora_rank to at most "
        "64.",
        "lora_rank 128 超过了任何被适配的层所能使用的秩：d_in x d_out 层的 LoRA 更新的秩最多为 `min(d_in, d_out)`，而"
        f"被适配的层为 {shapes}，另有 3 种（输入 x 输出）；请把 lora_rank 设为不超过 64。",
    )


def test_an_auto_fit_set_up_is_said_in_chinese():
    """The set-up that came closest (a planner Note made of parts) inside ``auto_fit``'s refusal and inside the plan's
    "nothing fits" note: Chinese parts on the board, the English as ``tunekit plan`` printed it."""
    from tunekit.config import load_config
    from tunekit.plan import apply_auto_fit, make_plan
    from tunekit.plan.gpus import GPU
    from tunekit.webui.plan_panel import format_plan

    cfg = load_config(None, {"model_name_or_path": "qwen2.5-7b", "template": "qwen", "finetuning_type": "full"})
    with pytest.raises(ConfigError) as err:
        apply_auto_fit(cfg, gpu=GPU("3 GiB", 3.0, 0.0), world_size=1)
    short = re.search(r"needs (\d+\.\d) GiB more", str(err.value)).group(1)
    said_in_both(
        err.value,
        "auto_fit: nothing fits on 3 GiB (3.0 GiB): the smallest set-up (DeepSpeed z3_offload + gradient "
        f"checkpointing + Liger) needs {short} GiB more. Run `tunekit plan` for the breakdown.",
        "auto_fit：3 GiB（3.0 `GiB`）上什么都放不下：最小的配置（DeepSpeed z3_offload + 梯度检查点 + Liger）还需要 "
        f"{short} `GiB`。运行 `tunekit plan` 查看明细。",
    )
    plan = make_plan(cfg, gpu_memory_gib=3, num_samples=8, auto_fit=True).to_json()
    assert plan["fit"]["choice"] == "DeepSpeed z3_offload + gradient checkpointing + Liger"  # the JSON as before
    zh = [line for line in format_plan(plan, "zh").splitlines() if "放不下" in line]
    assert len(zh) == 1 and "（DeepSpeed z3_offload + 梯度检查点 + Liger）" in zh[0], zh
    assert untranslated(zh[0], ALLOWED) == [], zh


def test_a_bad_nnodes_fails_a_job_with_a_chinese_reason(tmp_path, monkeypatch, capsys):
    """env.py's errors are keyed too (its own table, merged into the problems'): ``NNODES=x tunekit train`` prints the
    English as before, writes the key to the error file, and the board says it in Chinese; so does a launcher's
    variable that is not a whole number."""
    from tunekit.env import env_world_size

    config = tmp_path / "run.yaml"
    config.write_text(f"model_name_or_path: {tmp_path / 'model'}\ntemplate: qwen\ndataset: toy\n", encoding="utf-8")
    monkeypatch.setenv("NNODES", "x")
    line, written, zh = failed_job(["train", str(config)], tmp_path, monkeypatch, capsys)
    assert (line, written, zh) == (
        "error: NNODES='x' is not a whole number.",
        [{"key": "env_nnodes_not_whole_number", "values": {"raw": "'x'"}}],
        "NNODES='x' 不是整数。",
    )
    monkeypatch.setenv("NNODES", "0")
    assert failed_job(["train", str(config)], tmp_path, monkeypatch, capsys)[::2] == (
        "error: NNODES=0 must be at least 1.",
        "NNODES=0 必须至少为 1。",
    )
    monkeypatch.setenv("WORLD_SIZE", "eight")
    with pytest.raises(EnvironmentProblem) as err:
        env_world_size()
    said_in_both(
        err.value,
        "The environment variable WORLD_SIZE='eight' is not a whole number; unset it or let the launcher (torchrun, "
        "deepspeed) set it.",
        "环境变量 WORLD_SIZE='eight' 不是整数；请取消设置它，或让启动器（`torchrun`、deepspeed）来设置。",
    )
