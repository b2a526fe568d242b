"""A training, export or config-reading job's errors said in Chinese on the board (``config/problem_texts_run.py``,
``webui/problems_zh_run.py``): the model loader, the run, resuming, the stages, the launcher, the engines, the
exporters and the config readers raise them keyed, so a failed job's reason is Chinese on the board; the English the
CLI prints is unchanged word for word."""

from __future__ import annotations

import ast
import re
import string

import pytest

from tests.helpers import ROOT, failed_job
from tests.zh_words import option_words, said_in_both, untranslated, value_words
from tunekit.config.problem_texts import ENGLISH
from tunekit.config.problem_texts_run import ENGLISH_RUN
from tunekit.config.problems import Said
from tunekit.errors import ConfigError, ModelError
from tunekit.model.finetuning import check_oft_blocks
from tunekit.plan.gpus import find_gpu, known_gpus
from tunekit.webui.problems_zh import say_error

ALLOWED = option_words()
HAN = re.compile(r"[\u4e00-\u9fff]")
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
)
USER_ERRORS = ("TunekitError", "ConfigError", "DataError", "RecordError", "ModelError", "EnvironmentProblem")
# pieces that are only punctuation around their values in Chinese
NO_WORDS = {"part_weights_both", "part_resume_torn", "gguf_runner_failed"}


def _known(key: ast.expr) -> bool:
    """A key of ENGLISH, or an f-string key whose start names some (``Said(f"type_{text}")``)."""
    if isinstance(key, ast.JoinedStr) and isinstance(key.values[0], ast.Constant):
        return any(k.startswith(key.values[0].value) for k in ENGLISH)
    return isinstance(key, ast.Constant) and key.value in ENGLISH


def test_the_run_modules_raise_their_user_errors_keyed():
    """A user error raised with a literal or f-string message could not be said in Chinese: each is raised with a
    :class:`Said` (or through ``config_error``), whose key has an English template."""
    literal, unknown = [], []
    for name in KEYED_MODULES:
        for node in ast.walk(ast.parse((SRC / name).read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func, first = getattr(node.func, "id", ""), node.args[0]
            if func in USER_ERRORS and isinstance(first, (ast.JoinedStr, ast.Constant, ast.BinOp)):
                literal.append(f"{name}:{node.lineno}")
            keys = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            if func in ("Said", "config_error") and not all(_known(k) for k in keys):
                unknown.append(f"{name}:{node.lineno}")
    assert literal == [] and unknown == []


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


def test_ray_is_refused_in_chinese():
    """``RAY_REFUSED``, raised from a constant, is keyed too."""
    from tunekit.train.engines.launcher import RAY_REFUSED

    zh = say_error(ConfigError(RAY_REFUSED), "zh")
    assert RAY_REFUSED.key == "launch_ray" and HAN.search(zh) and untranslated(zh, ALLOWED) == [], zh
