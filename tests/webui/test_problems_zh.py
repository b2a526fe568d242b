"""The config's problems said in Chinese on the board: every problem key has a Chinese template with the same
placeholders (``webui/problems_zh.py`` against ``config/problem_texts.py``), every rule that can be broken cheaply is
said with no untranslated English (the check of ``tests/zh_words.py``: option names, values, paths and code stay as
they are), the English the CLI prints is unchanged, and the board's summary and field messages follow the page's
language."""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import ROOT
from tests.zh_words import option_words, untranslated, value_words
from tunekit.config.problem_texts import ENGLISH, JOINS
from tunekit.config.problems import Said
from tunekit.messages import placeholders
from tunekit.webui.paths import PathPolicy, excerpt
from tunekit.webui.problems_zh import JOINS_ZH, ZH, say
from tunekit.webui.validation import validate

SRC = ROOT / "src" / "tunekit"


def test_every_problem_key_has_a_chinese_template_with_the_same_placeholders():
    assert set(ZH) == set(ENGLISH), (sorted(set(ENGLISH) - set(ZH)), sorted(set(ZH) - set(ENGLISH)))
    wrong = {key: (placeholders(ENGLISH[key]), placeholders(ZH[key])) for key in ENGLISH}
    assert {k: v for k, v in wrong.items() if v[0] != v[1]} == {}
    assert set(JOINS_ZH) == set(JOINS)
    assert {name for name in JOINS if isinstance(JOINS[name], tuple) != isinstance(JOINS_ZH[name], tuple)} == set()


def _calls(folder: str) -> list[tuple[str, ast.Call]]:
    out = []
    for path in sorted((SRC / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args:
                out.append((f"{folder}/{path.relative_to(SRC / folder)}:{node.lineno}", node))
    return out


def test_the_rules_make_their_problems_from_keys_with_an_english_template():
    """A Problem built from a literal sentence could not be said in Chinese; a key is one of ENGLISH's (a key made
    with an f-string names the start of some keys)."""
    literal = []
    unknown = []
    for where, call in _calls("config") + _calls("webui") + _calls("train/engines") + _calls("plan"):
        name = getattr(call.func, "id", "")
        first = call.args[0]
        if name == "Problem" and isinstance(first, (ast.JoinedStr, ast.Constant)):
            literal.append(where)
        if name in ("Said", "problem", "config_error"):
            if isinstance(first, ast.Constant) and first.value not in ENGLISH:
                unknown.append((where, first.value))
            if isinstance(first, ast.JoinedStr):
                start = first.values[0].value if isinstance(first.values[0], ast.Constant) else ""
                if not any(key.startswith(start) for key in ENGLISH):
                    unknown.append((where, start))
    assert literal == [], "make these problems with problem(key, fields, **values) (config/problem_texts.py)"
    assert unknown == []


# configs that break one rule each (the board's form values), cheap to check: no model, no data, no torch
BROKEN = [
    dict(padding_free=True, packing=True),
    dict(stage="pt", padding_free=True),
    dict(batching_strategy="padding_free", padding_free=False),
    dict(stage="kto", max_tokens_per_batch=4096),
    dict(stage="ppo", max_tokens_per_batch=4096, reward_model="r"),
    dict(stage="dpo", max_tokens_per_batch=1000, cutoff_len=1024),
    dict(max_tokens_per_batch=100, cutoff_len=1024),
    dict(max_tokens_per_batch=4096, group_by_length=True),
    dict(max_tokens_per_batch=2147483648),
    dict(neat_packing=True, packing=False),
    dict(stage="pt", neat_packing=True),
    dict(interleave_probs="0.5,0.5", mix_strategy="concat"),
    dict(stage="dpo", packing=True),
    dict(stage="dpo", thought_loss_weight=0.5),
    dict(thought_loss_weight=0.5, enable_thinking=False),
    dict(thought_loss_weight=0.5, use_dft_loss=True),
    dict(dataset="a,,b"),
    dict(per_device_train_batch_size=4194304, cutoff_len=1024),
    dict(max_steps=0),
    dict(warmup_steps=2.5),
    dict(warmup_steps=0.1, warmup_ratio=0.1),
    dict(stage="rm", neftune_noise_alpha=5),
    dict(stage="ppo", neftune_noise_alpha=5, reward_model="r"),
    dict(stage="grpo", neftune_noise_alpha=5, reward_model="r"),
    dict(stage="dpo", neftune_noise_alpha=5, finetuning_type="lora"),
    dict(val_size=1.5),
    dict(val_size=0.1, eval_dataset="x"),
    dict(eval_strategy="steps"),
    dict(load_best_model_at_end=True),
    dict(load_best_model_at_end=True, eval_strategy="steps", val_size=0.1, save_strategy="epoch"),
    dict(logging_steps=2.5),
    dict(
        load_best_model_at_end=True,
        eval_strategy="steps",
        save_strategy="steps",
        save_steps=7,
        logging_steps=5,
        val_size=0.1,
    ),
    dict(lr_scheduler_type="reduce_lr_on_plateau"),
    dict(lr_scheduler_type="constant", lr_scheduler_kwargs={"a": 1}),
    dict(lr_scheduler_type="cosine", lr_scheduler_kwargs={"bogus": 1}),
    dict(use_llama_pro=True, finetuning_type="lora"),
    dict(use_galore=True, use_apollo=True, finetuning_type="full"),
    dict(use_muon=True, loraplus_lr_ratio=16, finetuning_type="lora"),
    dict(use_galore=True, finetuning_type="lora"),
    dict(use_galore=True, finetuning_type="full", deepspeed="z2"),
    dict(use_galore=True, galore_layerwise=True, finetuning_type="full", gradient_accumulation_steps=2),
    dict(use_galore=True, finetuning_type="full", optim="sgd"),
    dict(use_apollo=True, finetuning_type="full", optim="sgd"),
    dict(use_badam=True, badam_mode="ratio", finetuning_type="full"),
    dict(use_badam=True, finetuning_type="full", fsdp="full_shard"),
    dict(use_badam=True, finetuning_type="full", deepspeed="z2"),
    dict(pure_bf16=True, bf16=True),
    dict(pure_bf16=True, dtype="float16"),
    dict(pure_bf16=True, deepspeed="z3"),
    dict(fp8=True, fp8_backend="msamp"),
    dict(fp8=True, quantization_bit=4),
    dict(fp8=True, fp8_enable_fsdp_float8_all_gather=True),
    dict(use_dft_loss=True, use_eaft_loss=True),
    dict(stage="dpo", use_dft_loss=True),
    dict(fsdp_config="fsdp.json"),
    dict(fsdp_transformer_layer_cls_to_wrap="LlamaDecoderLayer"),
    dict(report_to="foo"),
    dict(image_min_pixels=100, image_max_pixels=10),
    dict(freeze_vision_tower=True, freeze_multi_modal_projector=True, freeze_language_model=True),
    dict(gradient_checkpointing=True, disable_gradient_checkpointing=True),
    dict(use_v1_kernels=True),
    dict(stage="dpo", moe_aux_loss_coef=0.01),
    dict(new_special_tokens_config="t.yaml", add_special_tokens="<a>"),
    dict(init_special_tokens="desc_init"),
    dict(export_quantization_method="bnb", export_quantization_dataset="x"),
    dict(export_gguf_type="q8_0"),
    dict(export_format="gguf", export_quantization_bit=4),
    dict(finetuning_type="full", lora_rank=16),
    dict(finetuning_type="full", lora_rank=16, lora_alpha=32),
    dict(finetuning_type="lora", freeze_trainable_layers=4),
    dict(finetuning_type="lora", freeze_trainable_layers=4, freeze_extra_modules="x"),
    dict(quantization_bit=4, finetuning_type="full"),
    dict(use_dora=True, pissa_init=True),
    dict(pissa_convert=True),
    dict(pissa_convert=True, pissa_init=True, additional_target="embed_tokens"),
    dict(galore_rank=8),
    dict(galore_rank=8, galore_scale=2),
    dict(finetuning_type="lora", oft_rank=4),
    dict(finetuning_type="oft", oft_rank=0, oft_block_size=0),
    dict(finetuning_type="lora", pre_seq_len=8),
    dict(finetuning_type="lora", pre_seq_len=8, prefix_projection=True),
    dict(finetuning_type="lora", num_virtual_tokens=8),
    dict(finetuning_type="ptuning", stage="ppo", reward_model="r"),
    dict(finetuning_type="prompt", stage="grpo", reward_model="r"),
    dict(finetuning_type="prompt", stage="dpo"),
    dict(finetuning_type="prompt", stage="rm"),
    dict(finetuning_type="prompt", use_dft_loss=True),
    dict(finetuning_type="ptuning", padding_free=True),
    dict(finetuning_type="prompt", padding_free=True),
    dict(finetuning_type="ptuning", use_galore=True),
    dict(finetuning_type="prompt", use_muon=True),
    dict(finetuning_type="ptuning", gradient_checkpointing=True),
    dict(finetuning_type="ptuning", gradient_checkpointing_layers=2),
    dict(fsdp="weird"),
    dict(fsdp="full_shard shard_grad_op"),
    dict(stage="rm", fsdp="full_shard"),
    dict(fsdp="full_shard", fp16=True),
    dict(fsdp="full_shard", do_predict=True),
    dict(stage="grpo"),
    dict(bf16=True, fp16=True),
    dict(deepspeed="z2", fsdp="full_shard"),
    dict(mask_history=True, train_on_prompt=True),
    dict(learning_rate=-1),
    dict(learning_rate=0),
    dict(eval_strategy="sometimes"),
    dict(cutoff_len="abc"),
    dict(cutoff_len=1.5),
    dict(learning_rate="fast"),
    dict(learning_rate=float("inf")),
    dict(packing="maybe"),
    dict(seed=True),
    dict(seed=18446744073709551616),
    dict(learnin_rate=1),
    dict(zzqq=1),
    dict(evaluation_strategy="steps", eval_strategy="no"),
    dict(accelerator_config="x"),
    dict(dataset="a,a"),
    dict(eval_dataset="b,b", val_size=0),
]


@pytest.mark.parametrize("values", BROKEN, ids=",".join)
def test_a_broken_rule_is_said_in_chinese_with_no_untranslated_english(values):
    check = validate(values)
    assert not check.ok and check.lines, values
    allowed = option_words()
    for line in check.lines:
        assert isinstance(line, Said), f"{line!r} has no key"
        zh = say(line, "zh")
        assert re.search(r"[\u4e00-\u9fff]", zh), zh
        assert untranslated(zh, allowed | value_words(line, skip_keys=("pydantic_other",))) == [], zh
        assert say(line, "en") == line  # the English is the CLI's, unchanged
    assert check.text("en") == check.message


@pytest.mark.parametrize(
    ("values", "field", "english", "chinese"),
    [
        (
            dict(finetuning_type="full", lora_rank=16),
            "lora_rank",
            "lora_rank is a LoRA option but finetuning_type is 'full': remove it or set finetuning_type: lora.",
            "lora_rank 是 LoRA 参数，但 finetuning_type 为 'full'：请删除它，或设置 finetuning_type: lora。",
        ),
        (
            dict(learning_rate=-0.0001),
            "learning_rate",
            "Option 'learning_rate' (in the form) got -0.0001 (float), expected a number (float): Input should be "
            "greater than 0.",
            "参数 'learning_rate'（表单中）的值 -0.0001（float）无效，应为 数字（`float`）：必须大于 0。",
        ),
        (
            dict(dataset="alpaca_demo,alpaca_demo"),
            "dataset",
            "dataset: 'alpaca_demo' is chosen twice, so a run would read its samples twice: pick each dataset once.",
            "dataset：'alpaca_demo' 被选了两次，训练会把它的样本读两遍：每个数据集只选一次。",
        ),
        (
            dict(stage="rm", fsdp="full_shard"),
            "fsdp",
            "fsdp: full_shard is not supported for stage rm (a value head saved beside the model, or generation "
            "during training); fsdp runs the stages pt, sft, dpo and kto. Remove fsdp.",
            "fsdp: full_shard 不支持 rm 阶段（模型旁保存了价值头，或训练中需要生成）；"
            "fsdp 支持的阶段为 pt、sft、dpo 和 kto。请删除 fsdp。",
        ),
    ],
)
def test_common_problems_in_both_languages_at_their_field(values, field, english, chinese):
    check = validate(values)
    assert check.message == english and check.by_field[field] == [english]
    assert check.text("en") == english and check.field_text(field, "en") == [english]
    assert check.text("zh") == chinese and check.field_text(field, "zh") == [chinese]


def test_pydantic_errors_keep_pydantic_english_and_a_message_without_a_key_is_shown_as_it_is():
    check = validate(dict(eval_strategy="sometimes", cutoff_len="abc"))
    assert check.message.splitlines() == [
        "Option 'eval_strategy' (in the form) got 'sometimes' (str), expected Literal['no', 'steps', 'epoch']: Input "
        "should be 'no', 'steps' or 'epoch'.",
        "Option 'cutoff_len' (in the form) got 'abc' (str), expected a whole number (int): Input should be a valid "
        "integer, unable to parse string as an integer.",
    ]
    assert check.text("zh").splitlines() == [
        "参数 'eval_strategy'（表单中）的值 'sometimes'（str）无效，应为 Literal['no', 'steps', 'epoch']：必须是 "
        "'no'、'steps' 或 'epoch'。",
        "参数 'cutoff_len'（表单中）的值 'abc'（str）无效，应为 整数（`int`）：必须是整数，无法把该文本解析为整数。",
    ]
    assert say("a message made as plain text", "zh") == "a message made as plain text"
    other = Said(
        "option_invalid",
        option="x",
        where="w",
        given="1",
        type="int",
        expected="e",
        detail=Said("pydantic_other", msg="Something pydantic says"),
    )
    assert say(other, "zh").endswith("：Something pydantic says。")  # kept whole: never a wrong translation


def test_the_board_shows_the_summary_in_the_page_language():
    pytest.importorskip("gradio")  # the tabs import gradio
    from tunekit.webui.tabs import errors_md

    check = validate(dict(finetuning_type="full", lora_rank=16))
    assert errors_md(check, "zh") == (
        "**请先修正以下参数：**\n\n```\nlora_rank 是 LoRA 参数，但 finetuning_type 为 'full'：请删除它，或设置 "
        "finetuning_type: lora。\n```"
    )
    assert "lora_rank is a LoRA option" in errors_md(check, "en")


def test_the_path_policy_refusals_are_said_in_chinese(tmp_path):
    (tmp_path / "work" / ".hidden").mkdir(parents=True)
    policy = PathPolicy(tmp_path / "work", caches=[])
    values = {"model_name_or_path": ".hidden/m", "output_dir": str(tmp_path / "elsewhere"), "trust_remote_code": True}
    said = {option: say(message, "zh") for option, message in policy.problems(values)}
    assert said == {
        "model_name_or_path": "参数 'model_name_or_path' '.hidden/m' 被拒绝：面板不读写隐藏的文件或目录（'.hidden'）。"
        "请使用不含以 '.' 开头部分的路径。",
        "output_dir": f"参数 'output_dir' '{excerpt(tmp_path / 'elsewhere', 80)}' 不在面板可访问的目录内"
        f"（{tmp_path / 'work'}）。"
        "请使用这些目录内的路径，或用 `--allow-path DIR`（或 `--workspace DIR`）重新启动面板。",
        "trust_remote_code": "参数 'trust_remote_code' 会运行表单中指定的代码，因此面板拒绝它；"
        "请用 `--allow-remote-code` 重新启动面板以允许它，或在终端中运行 `tunekit train`。",
    }
    english = dict(policy.problems(values))
    assert english["trust_remote_code"] == (
        "Option 'trust_remote_code' runs code named in the form, so the board refuses it; restart the board with "
        "--allow-remote-code to allow it, or run `tunekit train` from a shell."
    )


def test_a_placeholder_may_be_called_key():
    said = Said("path_what_key", what=Said("path_what_option", option="dataset"), key="file_name")
    assert said == "Option 'dataset' file_name" and said.key == "path_what_key"
    assert say(said, "zh") == "参数 'dataset' 的 file_name"
