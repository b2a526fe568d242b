"""Messages beyond the schema's rules said in Chinese on the board: the DeepSpeed file against the
options, LLaMA-Factory options tunekit refuses with their reasons, a LLaMA-Factory v1 config's refusals, and the Train
tab's Save / Load results. Each is keyed (its English in ``config/problem_texts.py`` / ``problem_texts_v1.py``, its
Chinese in ``webui/problems_zh.py`` / ``problems_zh_v1.py``); the English the CLI prints is unchanged, the Chinese has
no untranslated English (``tests/zh_words.py``: option names, values, paths and code stay as they are)."""

from __future__ import annotations

import json
import re
import string

import pytest

from tests.zh_words import option_words, untranslated, value_words
from tunekit.config import build_config
from tunekit.config.llamafactory_options import WHY_UNSUPPORTED
from tunekit.config.llamafactory_v1 import read_v1_config
from tunekit.config.problem_texts_v1 import ENGLISH_V1
from tunekit.errors import ConfigError
from tunekit.messages import Keyed
from tunekit.webui.board import Board
from tunekit.webui.paths import PathPolicy, PathRefused
from tunekit.webui.problems_zh import ZH, say, say_error

ALLOWED = option_words()


def _keys(message) -> set[str]:
    """The keys of a keyed message and of the parts it is made of."""
    found, stack = set(), [message]
    while stack:
        item = stack.pop()
        if isinstance(item, Keyed):
            found.add(item.key)
            stack.extend(item.values.values())
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
    return found


def _said_in_chinese(message) -> str:
    """``message`` said in Chinese, checked: keyed, Chinese, no untranslated English, its English unchanged."""
    assert isinstance(message, Keyed), f"{message!r} has no key"
    zh = say(message, "zh")
    assert re.search(r"[\u4e00-\u9fff]", zh), zh
    assert untranslated(zh, ALLOWED | value_words(message)) == [], zh
    assert say(message, "en") == message
    return zh


def _refusal(call, *args):
    with pytest.raises(ConfigError) as err:
        call(*args)
    return err.value


# ---------------------------------------------------------------- the DeepSpeed file against the options


def test_a_deepspeed_file_contradicting_the_options_is_said_in_chinese_at_its_field(tmp_path):
    (tmp_path / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.5, "zero_optimization": {"stage": 3}})
    )
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[]))
    form = board.defaults()
    form.update(
        {"model_name_or_path": "m", "dataset": "d", "deepspeed": "ds.json", "per_device_train_batch_size": "1"}
    )
    check = board.validate(board.values(form))
    english = (
        "deepspeed: ds.json contradicts tunekit's options in 2 place(s): (1) train_micro_batch_size_per_gpu is 4 "
        "but per_device_train_batch_size is 1; (2) gradient_clipping is 0.5 but max_grad_norm is 1.0. Set each "
        'of these fields to "auto" (recommended: tunekit\'s options fill them) or make both agree.'
    )
    chinese = (
        "deepspeed：ds.json 与 tunekit 的参数有 2 处矛盾：（1）train_micro_batch_size_per_gpu 为 4，而 "
        "per_device_train_batch_size 为 1；（2）gradient_clipping 为 0.5，而 max_grad_norm 为 1.0。请把这些字段都设为 "
        '"auto"（推荐：由 tunekit 的参数填写），或让两边一致。'
    )
    assert not check.ok and check.message == english and check.text("en") == english
    assert check.text("zh") == chinese and check.field_text("deepspeed", "zh") == [chinese]
    assert check.field_text("deepspeed", "en") == [english]
    _said_in_chinese(check.lines[0])


@pytest.mark.parametrize(
    "content",
    [
        {"train_batch_size": 16, "zero_optimization": {"stage": 3}},  # not micro x accumulation x world
        {"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2},  # no accumulation makes it
        {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}},
        {"train_micro_batch_size_per_gpu": 0},  # not a positive whole number
        {"zero_optimization": {"stage": 5}},
        {"zero_optimization": {"stage": "three"}},
        {"zero_optimization": [3]},
        {"tensor_parallel": {"autotp_size": 2}, "bf16": {"enabled": True}, "optimizer": {"type": "AdamW"}},
        [1, 2],  # not a JSON object
    ],
)
def test_every_deepspeed_problem_is_said_in_chinese(tmp_path, content):
    (tmp_path / "ds.json").write_text(json.dumps(content))
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[]))
    form = board.defaults()
    form.update({"model_name_or_path": "m", "dataset": "d", "deepspeed": "ds.json", "use_adam_mini": True})
    check = board.validate(board.values(form))
    assert not check.ok and check.lines
    for line in check.lines:
        _said_in_chinese(line)
    assert check.text("en") == check.message


def test_an_unknown_preset_and_a_missing_file_are_said_in_chinese(tmp_path):
    from tunekit.train.engines.deepspeed_config import preset_config, read_deepspeed

    missing = _refusal(read_deepspeed, "z4")
    assert str(missing) == (
        "deepspeed: 'z4' is neither a preset (a preset name: z0, z1, z2, z2_offload, z3, z3_offload) nor an "
        "existing JSON file."
    )
    assert say_error(missing, "zh") == (
        "deepspeed：'z4' 既不是预设（预设名：z0、z1、z2、z2_offload、z3、z3_offload），也不是已存在的 JSON 文件。"
    )
    assert missing.problems[0].fields == ("deepspeed",)
    _said_in_chinese(_refusal(preset_config, "z9").problems[0].message)
    (tmp_path / "bad.json").write_bytes(b"\xff{")
    _said_in_chinese(_refusal(read_deepspeed, str(tmp_path / "bad.json")).problems[0].message)


# ---------------------------------------------------------------- LLaMA-Factory options tunekit refuses, with why


@pytest.mark.parametrize("option", sorted(WHY_UNSUPPORTED))
def test_each_unsupported_option_and_its_reason_are_said_in_chinese(option):
    (problem,) = _refusal(build_config, {option: 1}).problems
    assert WHY_UNSUPPORTED[option].key in _keys(problem.message)
    assert problem.fields == (option,)
    _said_in_chinese(problem.message)


def test_an_unsupported_option_in_both_languages():
    (problem,) = _refusal(build_config, {"mixture_of_depths": "convert"}).problems
    assert problem.message == (
        "`mixture_of_depths` is a LLaMA-Factory option that tunekit does not support (yet) (config): remove it; "
        "`tunekit train --help` lists what tunekit supports. (Mixture-of-Depths needs the mixture-of-depth package "
        "(LLaMA-Factory requires >=1.1.6), whose latest release, 1.2.0, imports what transformers 5 removed "
        "(TRANSFORMERS_CACHE, transformers.modeling_attn_mask_utils).)"
    )
    assert say(problem.message, "zh") == (
        "`mixture_of_depths` 是 tunekit（暂）不支持的 LLaMA-Factory 参数（配置中）：请删除它；`tunekit train --help` "
        "列出了 tunekit 支持的参数。（深度混合（`mixture_of_depths`）需要 `mixture-of-depth` 包（LLaMA-Factory 要求 "
        ">=1.1.6），而它的最新版本 1.2.0 导入了 transformers 5 已删除的内容（TRANSFORMERS_CACHE、"
        "transformers.modeling_attn_mask_utils）。）"
    )


# ---------------------------------------------------------------- a LLaMA-Factory v1 config's refusals


def _v1_refusals(tmp_path) -> list:
    """The problems of v1 configs that, together, break every refusal a v1 config has."""
    (tmp_path / "data.json").write_text("[]")
    (tmp_path / "bad.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "listed.yaml").write_text("- a\n")
    entries = {
        "no_path": {"source": "local"},
        "extra": {"path": "data.json", "source": "local", "color": 1},
        "hub": {"path": "org/set"},
        "gone": {"path": "gone.json", "source": "local"},
        "split": {"path": "data.json", "source": "local", "split": "test"},
        "converter": {"path": "data.json", "source": "local", "converter": "pairs"},
        "stream": {"path": "data.json", "source": "local", "streaming": True},
        "size": {"path": "data.json", "source": "local", "size": 0},
        "weight": {"path": "data.json", "source": "local", "weight": -1},
        "first": {"path": "data.json", "source": "local", "size": 2},
        "again": {"path": "data.json", "source": "local", "size": 3},
    }
    (tmp_path / "list.yaml").write_text(json.dumps(entries))
    (tmp_path / "one.yaml").write_text(json.dumps({"a": {"path": "data.json", "source": "local", "size": 2}}))
    (tmp_path / "two.yaml").write_text(json.dumps({"b": {"path": "data.json", "source": "local", "size": 5}}))
    configs = [
        {
            "model": "m",
            "modle_class": "llm",
            "per_device_train_batch_size": 2,
            "flash_attn": "xformers",
            "save_epochs": 2,
            "cp_size": 2,
            "dp_size": 3,
            "mp_replicate_size": 2,
            "model_class": "vlm",
            "full_determinism": True,
            "ld_alpha": 0.5,
            "custom_chat_template": "{{ messages }}",
            "global_batch_size": "many",
            "train_dataset": 5,
            "eval_dataset": "no/such/dataset",
            "peft_config": {"name": "freeze", "cast_trainable_params_to_fp32": False},
            "dist_config": {"name": "fsdp2", "color": 1},
            "kernel_config": {"name": "flash-linear-attention,cuda_fused_moe,npu_fused_rope,fast_kernel"},
            "quant_config": {"name": "bnb", "quantization_bit": 4, "compute_dtype": "bf16"},
            "init_config": {"name": "init_on_disk"},
            "optim_config": {"name": "muon", "adamw_betas": [0.9], "momentum": 0.9},
            "lr_scheduler_config": {"name": "cosine"},
        },
        {
            "model": "m",
            "micro_batch_size": 2,
            "global_batch_size": 3,
            "train_dataset": "missing.yaml",
            "eval_dataset": "list.yaml",
            "peft_config": {"name": "prefix"},
            "dist_config": {"name": "fsdp2", "dcp_path": "ckpt"},
            "quant_config": {"name": "gptq"},
            "optim_config": {"name": "adamw"},
        },
        {"model": "m", "train_dataset": "bad.yaml", "eval_dataset": "listed.yaml", "peft_config": "lora"},
        {"model": "m", "train_dataset": "one.yaml", "eval_dataset": "two.yaml", "dist_config": {"name": "deepspeed"}},
        {"model": "m", "dist_config": {"name": "fsdpturbo", "ep_size": 2}},
        {"model": "m", "dist_config": {"name": "megatron"}},
    ]
    problems = []
    for values in configs:
        problems += _refusal(read_v1_config, values, "v1.yaml").problems
    return problems


def test_every_v1_refusal_is_said_in_chinese(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("NPROC_PER_NODE", raising=False)
    problems = _v1_refusals(tmp_path)
    seen = set().union(*(_keys(p.message) for p in problems))
    unmet = set(ENGLISH_V1) - seen - {"part_v1_how_world_size", "part_v1_how_nproc"}  # set by the environment
    assert unmet == set()
    for problem in problems:
        _said_in_chinese(problem.message)


def test_every_v1_template_is_chinese():
    """Each Chinese template, its placeholders filled with a letter, has no untranslated English (the parts a config
    above cannot reach, and those it reaches in one wording only)."""
    for key in ENGLISH_V1:
        names = {name for _t, name, _s, _c in string.Formatter().parse(ZH[key]) if name}
        text = ZH[key].format(**dict.fromkeys(names, " x "))
        assert untranslated(text, ALLOWED) == [], (key, text)


def test_a_v1_refusal_in_both_languages(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (problem,) = _refusal(read_v1_config, {"model": "m", "ld_alpha": 0.5}, "v1.yaml").problems
    assert (
        problem.message == "LLaMA-Factory v1 `ld_alpha: 0.5` (in v1.yaml): LD-DPO's length weighting is not in "
        "tunekit: remove it."
    )
    assert say(problem.message, "zh") == (
        "LLaMA-Factory v1 的 `ld_alpha: 0.5`（v1.yaml 中）：tunekit 没有长度去偏 DPO（ld_alpha）的长度加权：请删除它。"
    )
    assert problem.fields == ("ld_alpha",)


# ---------------------------------------------------------------- the Train tab's Save / Load YAML


def test_save_and_load_refusals_are_said_in_chinese(tmp_path):
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[]))
    (tmp_path / "run.yaml").write_text("learning_rate: 1.0e-4\n")
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "other.yaml").write_text("lerning_rate: 1\nfoo: 2\nbar: 3\nbaz: 4\n")
    (tmp_path / "neg.yaml").write_text("learning_rate: -1\n")
    cases = [
        (
            lambda: board.save_yaml({}, "run.yaml"),
            f"配置文件 {tmp_path / 'run.yaml'} 已存在：勾选“覆盖已有文件”以替换它，或换一个文件名。",
        ),
        (lambda: board.save_yaml({}, "run.txt"), "配置文件 'run.txt' 被拒绝：面板只保存 .yaml、.yml 或 .json 文件。"),
        (lambda: board.save_yaml({}, " "), "配置文件：请填写文件名，例如 configs/run.yaml。"),
        (lambda: board.load_yaml("nothere.yaml"), "配置文件 'nothere.yaml' 不存在。"),
        (lambda: board.load_yaml("broken.yaml"), f"{tmp_path / 'broken.yaml'} 不是有效的 YAML（第 2 行，第 1 列）。"),
        (lambda: board.load_yaml("list.yaml"), f"{tmp_path / 'list.yaml'} 必须是“参数: 值”的映射，实际为 `list`。"),
        (
            lambda: board.load_yaml("other.yaml"),
            f"{tmp_path / 'other.yaml'}：4 个未知参数：'lerning_rate'、'foo'、'bar' ...。可用参数见 "
            "`tunekit train --help`。",
        ),
        (
            lambda: board.load_yaml("/elsewhere/run.yaml"),
            f"配置文件 '/elsewhere/run.yaml' 不在面板可访问的目录内（{tmp_path}）。请使用这些目录内的路径，或用 "
            "`--allow-path DIR`（或 `--workspace DIR`）重新启动面板。",
        ),
    ]
    for call, chinese in cases:
        with pytest.raises(ConfigError) as err:
            call()
        assert say_error(err.value, "zh") == chinese
        assert say_error(err.value, "en") == str(err.value)
    assert str(_refusal(board.save_yaml, {}, "run.yaml")) == (
        f"Config file {tmp_path / 'run.yaml'} already exists: tick 'Overwrite' to replace it, or choose another name."
    )
    loaded = _refusal(board.load_yaml, "neg.yaml")  # the schema's problem, said from its key
    assert say_error(loaded, "zh") == (
        "参数 'learning_rate'（neg.yaml 中）的值 -1（int）无效，应为 数字（`float`）：必须大于 0。"
    )


def test_the_train_tab_says_saved_and_loaded_in_the_page_language(tmp_path):
    pytest.importorskip("gradio")
    from tunekit.webui.app import create_app

    demo = create_app(Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[])))
    tab = demo.tk_tabs["train"]

    def click(button, values):
        (fn,) = [f for f in demo.fns.values() if (button._id, "click") in f.targets and tab.errors in f.outputs]
        lang = next(c for c in fn.inputs if getattr(c, "elem_id", None) == "tk-lang")
        data = {c: getattr(c, "value", None) for c in fn.inputs}
        data.update({lang: "zh", tab.config_path: "run.yaml", **values})
        return fn.fn(data)[tab.errors]

    assert click(tab.save_btn, {tab.overwrite: False}) == "✓ 已保存 " + str(tmp_path / "run.yaml")
    assert click(tab.save_btn, {tab.overwrite: False}) == (
        f"⚠ 配置文件 {tmp_path / 'run.yaml'} 已存在：勾选“覆盖已有文件”以替换它，或换一个文件名。"
    )
    assert click(tab.load_btn, {}) == "✓ 已加载 run.yaml"
    assert click(tab.load_btn, {tab.config_path: "gone.yaml"}) == (
        "**请先修正以下参数：**\n\n```\n配置文件 'gone.yaml' 不存在。\n```"
    )
    (tmp_path / "long.yaml").write_text(f"learning_rate: {'SECRET' * 20}\n")  # quoted only as a short excerpt
    said = click(tab.load_btn, {tab.config_path: "long.yaml"})
    assert "的值 'SECRETSECRETSECRETSECRET…'（str）无效" in said and "SECRET" * 5 not in said


def test_the_sample_preview_and_export_verify_notes_are_said_in_chinese(tmp_path):
    pytest.importorskip("gradio")
    from tunekit.webui.tabs.export import verify_args

    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[]))
    form = {**board.defaults(), "model_name_or_path": "", "dataset": ""}
    assert board.sample_preview_media(form, lang="zh")[3] == (
        "⚠ 请先设置 model_name_or_path、template 和 dataset，才能预览样本"
    )
    assert board.sample_preview_media(form)[3] == "⚠ set model_name_or_path, template and dataset to preview samples"
    with pytest.raises(PathRefused) as err:
        verify_args(board, "/elsewhere/merged")
    assert say_error(err.value, "zh") == (
        f"参数 'export_dir' '/elsewhere/merged' 不在面板可访问的目录内（{tmp_path}）。请使用这些目录内的路径，或用 "
        "`--allow-path DIR`（或 `--workspace DIR`）重新启动面板。"
    )
