"""Every cross-field rule names the options it concerns (``config/problems.py``).

A broken config per rule: the ConfigError carries the problems, each with its fields (pinned here), and its
message is exactly the problems' messages. A rule that still yields a bare string (a whole-config problem), and a
rule that no broken config below reaches, fail the test with their file and line, so new rules get fields and a case.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

from tunekit.config import Config, build_config
from tunekit.config import problems as problems_module
from tunekit.config.problems import Problem, as_problem
from tunekit.errors import ConfigError

FULL = {"finetuning_type": "full"}
EVAL = {"eval_strategy": "steps", "val_size": 0.1}

# (values, the fields of each problem the ConfigError carries, in order)
BROKEN: list[tuple[dict, list[tuple[str, ...]]]] = [
    ({"max_steps": 0}, [("max_steps",)]),
    ({"warmup_steps": 2.5}, [("warmup_steps",)]),
    ({"warmup_steps": 0.1, "warmup_ratio": 0.1}, [("warmup_steps", "warmup_ratio")]),
    ({"bf16": True, "fp16": True}, [("bf16", "fp16")]),
    ({**FULL, "lora_rank": 16, "use_dora": True}, [("lora_rank", "use_dora", "finetuning_type")]),
    ({"freeze_trainable_layers": 3}, [("freeze_trainable_layers", "finetuning_type")]),
    ({**FULL, "quantization_bit": 4}, [("quantization_bit", "finetuning_type")]),
    ({"use_dora": True, "pissa_init": True}, [("use_dora", "pissa_init")]),
    ({"pissa_convert": True}, [("pissa_convert", "pissa_init")]),
    ({"use_reentrant_gc": True, "gradient_checkpointing": False}, [("use_reentrant_gc", "gradient_checkpointing")]),
    ({"use_cpu": True, "resources_per_worker": {"GPU": 1}}, [("resources_per_worker", "use_cpu")]),
    (
        {"pissa_init": True, "pissa_convert": True, "additional_target": "embed_tokens"},
        [("pissa_convert", "additional_target")],
    ),
    (
        {"export_quantization_method": "bnb", "export_quantization_dataset": "c4"},
        [("export_quantization_dataset", "export_quantization_method")],
    ),
    ({"export_gguf_type": "q8_0"}, [("export_gguf_type", "export_format")]),
    ({"export_format": "gguf", "export_quantization_bit": 4}, [("export_quantization_bit", "export_format")]),
    ({"val_size": 2.5}, [("val_size",)]),
    ({"val_size": 0.1, "eval_dataset": "held_out"}, [("val_size", "eval_dataset")]),
    ({"eval_strategy": "steps"}, [("eval_strategy", "val_size", "eval_dataset")]),
    ({"load_best_model_at_end": True, "save_strategy": "no"}, [("load_best_model_at_end", "eval_strategy")]),
    (
        {**EVAL, "load_best_model_at_end": True, "save_strategy": "epoch"},
        [("load_best_model_at_end", "save_strategy", "eval_strategy")],
    ),
    ({"logging_steps": 2.5}, [("logging_steps",)]),
    ({**EVAL, "eval_steps": 10.5, "save_steps": 10.5}, [("eval_steps",), ("save_steps",)]),
    (
        {**EVAL, "load_best_model_at_end": True, "save_steps": 25},
        [("load_best_model_at_end", "save_steps", "eval_steps")],
    ),
    (
        {**EVAL, "load_best_model_at_end": True, "save_steps": 0.5, "eval_steps": 3},
        [("load_best_model_at_end", "save_steps", "eval_steps")],
    ),
    ({"lr_scheduler_type": "reduce_lr_on_plateau"}, [("lr_scheduler_type", "eval_strategy")]),
    ({"deepspeed": "z2", "fsdp": "full_shard"}, [("deepspeed", "fsdp")]),
    ({"mask_history": True, "train_on_prompt": True}, [("mask_history", "train_on_prompt")]),
    (
        {"gradient_checkpointing": True, "disable_gradient_checkpointing": True},
        [("gradient_checkpointing", "disable_gradient_checkpointing")],
    ),
    ({"report_to": "tensorboard,nosuch"}, [("report_to",)]),
    ({"neat_packing": True, "packing": False}, [("neat_packing", "packing")]),
    ({"neat_packing": True, "stage": "pt"}, [("neat_packing", "stage")]),
    ({"interleave_probs": "0.5,0.5"}, [("interleave_probs", "mix_strategy")]),
    ({"stage": "dpo", "packing": True}, [("packing", "stage")]),
    ({"stage": "grpo", "padding_free": True}, [("padding_free", "stage")]),
    ({"padding_free": True, "packing": True}, [("padding_free", "packing")]),
    ({"stage": "kto", "max_tokens_per_batch": 4096}, [("max_tokens_per_batch", "stage")]),
    ({"stage": "ppo", "max_tokens_per_batch": 4096}, [("max_tokens_per_batch", "stage")]),
    ({"stage": "dpo", "max_tokens_per_batch": 3000}, [("max_tokens_per_batch", "cutoff_len", "stage")]),
    ({"max_tokens_per_batch": 1024}, [("max_tokens_per_batch", "cutoff_len")]),
    ({"max_tokens_per_batch": 4096, "group_by_length": True}, [("max_tokens_per_batch", "group_by_length")]),
    ({"max_tokens_per_batch": 2**31}, [("max_tokens_per_batch",)]),
    (
        {"batching_strategy": "normal", "padding_free": True},
        [("batching_strategy", "padding_free", "max_tokens_per_batch")],
    ),
    ({"per_device_eval_batch_size": 2**21, "cutoff_len": 2**11}, [("per_device_eval_batch_size", "cutoff_len")]),
    (
        {"lr_scheduler_type": "constant", "lr_scheduler_kwargs": {"min_lr": 0.1}},
        [("lr_scheduler_kwargs", "lr_scheduler_type")],
    ),
    (
        {"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"min_lr": 0.1}},
        [("lr_scheduler_kwargs", "lr_scheduler_type")],
    ),
    ({**FULL, "galore_rank": 4, "galore_scale": 1.0}, [("galore_rank", "galore_scale", "use_galore")]),
    ({"oft_rank": 4}, [("oft_rank", "finetuning_type")]),
    ({"pre_seq_len": 16}, [("pre_seq_len", "finetuning_type")]),
    ({"finetuning_type": "ptuning", "stage": "ppo"}, [("stage", "finetuning_type")]),
    ({"finetuning_type": "prompt", "stage": "dpo"}, [("stage", "finetuning_type")]),
    ({"finetuning_type": "prompt", "use_dft_loss": True}, [("use_dft_loss", "finetuning_type")]),
    ({"finetuning_type": "ptuning", "padding_free": True}, [("padding_free", "finetuning_type")]),
    ({"finetuning_type": "ptuning", "use_galore": True}, [("use_galore", "finetuning_type")]),
    ({"finetuning_type": "ptuning", "gradient_checkpointing": True}, [("gradient_checkpointing", "finetuning_type")]),
    (
        {"finetuning_type": "ptuning", "gradient_checkpointing_layers": 1},
        [("gradient_checkpointing_layers", "finetuning_type")],
    ),
    ({"finetuning_type": "oft", "oft_block_size": 0}, [("oft_rank", "oft_block_size")]),
    ({"finetuning_type": "oft", "oft_rank": 4, "oft_block_size": 16}, [("oft_rank", "oft_block_size")]),
    ({**FULL, "use_galore": True, "use_apollo": True}, [("use_galore", "use_apollo")]),
    ({"use_muon": True, "loraplus_lr_ratio": 16.0}, [("use_muon", "loraplus_lr_ratio")]),
    ({"use_galore": True}, [("use_galore", "finetuning_type")]),
    ({**FULL, "use_apollo": True, "deepspeed": "z3"}, [("use_apollo", "deepspeed")]),
    ({**FULL, "use_galore": True, "fsdp": "full_shard"}, [("use_galore", "fsdp")]),
    (
        {**FULL, "use_galore": True, "galore_layerwise": True, "gradient_accumulation_steps": 2},
        [("galore_layerwise", "gradient_accumulation_steps")],
    ),
    ({**FULL, "use_galore": True, "optim": "sgd"}, [("use_galore", "optim")]),
    ({**FULL, "use_apollo": True, "optim": "adafactor"}, [("use_apollo", "optim")]),
    ({**FULL, "use_badam": True, "badam_mode": "ratio"}, [("badam_mode", "max_grad_norm")]),
    ({**FULL, "use_badam": True, "fsdp": "full_shard"}, [("use_badam", "fsdp")]),
    (
        {**FULL, "use_badam": True, "badam_mode": "ratio", "max_grad_norm": 0, "deepspeed": "z3"},
        [("use_badam", "deepspeed")],
    ),
    ({**FULL, "use_badam": True, "deepspeed": "z2"}, [("use_badam", "deepspeed")]),
    ({"use_llama_pro": True}, [("use_llama_pro", "finetuning_type")]),
    ({"pure_bf16": True, "fp16": True}, [("pure_bf16", "fp16")]),
    ({"pure_bf16": True, "dtype": "float16"}, [("pure_bf16", "dtype")]),
    ({"pure_bf16": True, "deepspeed": "z3"}, [("pure_bf16", "deepspeed")]),
    ({"fp8": True, "fp8_backend": "msamp"}, [("fp8_backend",)]),
    ({"fp8": True, "quantization_bit": 4}, [("fp8", "quantization_bit")]),
    ({"fp8": True, "fp8_enable_fsdp_float8_all_gather": True}, [("fp8_enable_fsdp_float8_all_gather", "fsdp")]),
    ({"fsdp_config": "fsdp.json"}, [("fsdp_config", "fsdp")]),
    ({"fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}, [("fsdp_transformer_layer_cls_to_wrap", "fsdp")]),
    ({"cp_size": 2, "stage": "dpo"}, [("cp_size", "stage")]),
    ({"cp_size": 2, "deepspeed": "z3"}, [("cp_size", "deepspeed")]),
    ({"cp_size": 2, "flash_attn": "eager"}, [("cp_size", "flash_attn")]),
    ({"cp_size": 2, "use_asft_loss": True}, [("cp_size", "use_asft_loss")]),
    ({"cp_size": 2, "neftune_noise_alpha": 5}, [("cp_size", "neftune_noise_alpha")]),
    ({"cp_size": 2, "finetuning_type": "ptuning"}, [("cp_size", "finetuning_type")]),
    ({"cp_size": 2, "use_unsloth": True}, [("cp_size", "use_unsloth")]),
    (
        {"cp_size": 2, "padding_free": True, "group_by_length": True},
        [("cp_size", "padding_free"), ("cp_size", "group_by_length")],
    ),
    ({"use_v1_kernels": True}, [("use_v1_kernels",)]),
    ({"stage": "dpo", "moe_aux_loss_coef": 0.01}, [("moe_aux_loss_coef", "stage")]),
    (
        {"new_special_tokens_config": "t.yaml", "add_special_tokens": "<a>"},
        [("add_special_tokens", "new_special_tokens_config")],
    ),
    ({"init_special_tokens": "desc_init"}, [("init_special_tokens", "new_special_tokens_config")]),
    ({"neftune_noise_alpha": 5, "stage": "rm"}, [("neftune_noise_alpha", "stage")]),
    (
        {"neftune_noise_alpha": 5, "stage": "dpo"},
        [("neftune_noise_alpha", "stage", "ref_model", "precompute_ref_log_probs")],
    ),
    ({"thought_loss_weight": 0, "stage": "kto"}, [("thought_loss_weight", "stage")]),
    ({"thought_loss_weight": 0, "enable_thinking": False}, [("thought_loss_weight", "enable_thinking")]),
    ({"thought_loss_weight": 0.5, "use_dft_loss": True}, [("thought_loss_weight", "use_dft_loss")]),
    ({"dataset": "toy,,toy"}, [("dataset",)]),
    ({"eval_dataset": "toy,"}, [("eval_dataset",)]),
    ({"use_dft_loss": True, "use_eaft_loss": True}, [("use_dft_loss", "use_eaft_loss")]),
    ({"use_dft_loss": True, "stage": "pt"}, [("use_dft_loss", "stage")]),
    ({"fsdp": "full_shard fast"}, [("fsdp",)]),
    ({"fsdp": "offload"}, [("fsdp",)]),
    ({"fsdp": "full_shard", "stage": "rm"}, [("fsdp", "stage")]),
    ({"fsdp": "shard_grad_op", "fp16": True}, [("fsdp", "fp16")]),
    ({"fsdp": "full_shard", "do_predict": True, "eval_dataset": "held_out"}, [("do_predict", "fsdp")]),
    ({"video_min_pixels": 512 * 512, "video_max_pixels": 256 * 256}, [("video_min_pixels", "video_max_pixels")]),
    ({"output_dir": ".", "model_name_or_path": "./"}, [("output_dir", "model_name_or_path")]),  # the same folder
    ({"output_dir": "./", "adapter_name_or_path": "x, ."}, [("output_dir", "adapter_name_or_path")]),
    (
        {**FULL, "freeze_language_model": True},
        [("freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model")],
    ),
]

# Configs that build but that no training run takes (config.schema.run_problems).
RUN_BROKEN = [{"stage": "grpo"}]

CONFIG_DIR = Path(problems_module.__file__).parent
# Where the cross-field rules live: config/schema.py and the ``*_problems`` functions it calls (engines.py, groups).
RULE_FILES = sorted(
    p.relative_to(CONFIG_DIR).as_posix() for p in CONFIG_DIR.rglob("*.py") if "_problems(" in p.read_text("utf-8")
)


def _refused(values: dict) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        build_config(values)
    return caught.value


@pytest.mark.parametrize("values,fields", BROKEN, ids=[",".join(v) for v, _ in BROKEN])
def test_each_broken_rule_names_its_fields(values, fields):
    error = _refused(values)
    assert [p.fields for p in error.problems] == fields, str(error)
    assert str(error) == "\n".join(p.message for p in error.problems)  # the text users read is the problems'
    for problem in error.problems:
        assert problem.fields and set(problem.fields) <= set(Config.model_fields), problem


def _rule_yields() -> list[tuple[str, ast.Yield]]:
    """``(file, yield)`` of every ``yield <value>`` inside a ``*_problems`` function of the rule files."""
    found = []
    for name in RULE_FILES:
        tree = ast.parse((CONFIG_DIR / name).read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef) and func.name.endswith("_problems"):
                found += [
                    (name, node) for node in ast.walk(func) if isinstance(node, ast.Yield) and node.value is not None
                ]
    return found


def _is_problem(node: ast.Yield) -> bool:
    """``Problem(message, fields)`` or ``problem(key, fields, **values)`` (a keyed message, config/problems.py)."""
    return (
        isinstance(node.value, ast.Call)
        and getattr(node.value.func, "id", "") in ("Problem", "problem")
        and len(node.value.args) == 2
    )


def test_every_rule_yields_a_problem_with_fields():
    bare = [f"config/{name}:{node.lineno}" for name, node in _rule_yields() if not _is_problem(node)]
    assert not bare, (
        f"these rules yield a bare message (shown for the whole form, at no field): {bare}; yield Problem(message, "
        "fields)"
    )


def test_every_rule_is_reached_by_a_broken_config(monkeypatch):
    """The cases above reach every ``yield Problem(...)`` of the rule files (a new rule needs a case here)."""
    hit: set[tuple[str, int]] = set()
    problems_module = sys.modules["tunekit.config.problems"]

    class Recording(Problem):
        def __post_init__(self):
            caller = sys._getframe(2)  # 1: the dataclass __init__, 2: the rule (or problems.problem, called by it)
            while caller.f_code.co_filename == problems_module.__file__:
                caller = caller.f_back
            hit.add((Path(caller.f_code.co_filename).resolve().relative_to(CONFIG_DIR).as_posix(), caller.f_lineno))
            super().__post_init__()

    for name, module in list(sys.modules.items()):  # every rule module's own name for Problem
        if name.startswith("tunekit.config.") and getattr(module, "Problem", None) is Problem:
            monkeypatch.setattr(module, "Problem", Recording)
    for values, _ in BROKEN:
        _refused(values)
    from tunekit.config.schema import run_problems

    for values in RUN_BROKEN:  # the rules of a training run (the board's validation and the trainers apply them)
        assert list(run_problems(build_config(values)))
    missed = [
        f"config/{name}:{node.lineno}"
        for name, node in _rule_yields()
        if _is_problem(node) and not any(f == name and node.lineno <= line <= node.end_lineno for f, line in hit)
    ]
    assert not missed, f"no broken config in tests/config/test_rule_fields.py reaches the rule(s) at {missed}: add one"


def test_a_bare_message_is_a_whole_config_problem():
    assert as_problem("x is wrong: fix it.") == Problem("x is wrong: fix it.", ())
    problem = Problem("bf16 and fp16", ["bf16", "fp16", "bf16"])
    assert as_problem(problem) is problem and problem.fields == ("bf16", "fp16")
    with pytest.raises(TypeError, match="a tuple of option names"):
        Problem("message", "bf16")


def test_field_errors_and_unknown_options_name_their_option():
    error = _refused({"learning_rate": -1, "lora_rank": 0})
    assert [p.fields for p in error.problems] == [("learning_rate",), ("lora_rank",)]
    error = _refused({"lora_rnak": 8})
    assert [(p.fields, p.message) for p in error.problems] == [
        (("lora_rnak",), "Unknown option 'lora_rnak' (config). Did you mean: lora_rank?")
    ]
    error = _refused({"seed": True})
    assert [p.fields for p in error.problems] == [("seed",)]
    assert inspect.signature(ConfigError).parameters["problems"].default == ()


def test_the_board_shows_each_problem_at_its_fields():
    """The board's validation (webui/validation.py) builds the config, so it refuses what training refuses, and puts
    each problem next to the options the rule names (no reading of names out of the text)."""
    from tunekit.webui.validation import validate

    check = validate({**FULL, "use_galore": True, "optim": "sgd", "lora_rank": 16})  # optim: a rule train/ had alone
    assert not check.ok
    galore = "use_galore works with optim adamw_torch (or adamw_8bit, adafactor), not sgd: set optim: adamw_torch."
    lora = "lora_rank is a LoRA option but finetuning_type is 'full': remove it or set finetuning_type: lora."
    assert check.by_field == {
        "lora_rank": [lora],
        "finetuning_type": [lora],
        "use_galore": [galore],
        "optim": [galore],
    }
    assert check.message == f"{lora}\n{galore}"
    check = validate({"fsdp": "full_shard", "stage": "rm", "per_device_train_batch_size": "x"})
    assert set(check.by_field) == {"per_device_train_batch_size"}  # field errors first: pydantic stops there
    check = validate({"fsdp": "full_shard", "stage": "rm"})
    assert set(check.by_field) == {"fsdp", "stage"} and check.message.startswith(
        "fsdp: full_shard is not supported for stage rm"
    )


def test_step_rules_accept_what_hugging_face_accepts():
    """The step rules mirror TrainingArguments: these build, and TrainingArguments takes them (checked with it)."""
    from transformers import TrainingArguments

    from tunekit.train.arguments import training_arguments_kwargs

    accepted = [
        {"save_strategy": "epoch", "save_steps": 10.5},  # save_steps unused
        {**EVAL, "load_best_model_at_end": True, "save_steps": 0.5, "eval_steps": 0.25},
        {**EVAL, "load_best_model_at_end": True, "save_steps": 100, "eval_steps": 20.0},
        {**EVAL, "load_best_model_at_end": True, "save_steps": 30},  # eval_steps from logging_steps 10
        {"logging_steps": 0.05, "lr_scheduler_type": "reduce_lr_on_plateau", **EVAL},
    ]
    for values in accepted:
        cfg = build_config({"output_dir": "out", **values})
        TrainingArguments(**training_arguments_kwargs(cfg, []))
    for values in (
        {"logging_steps": 2.5},
        {**EVAL, "load_best_model_at_end": True, "save_steps": 25},
        {**EVAL, "load_best_model_at_end": True, "save_steps": 0.5, "eval_steps": 3},
        {"lr_scheduler_type": "reduce_lr_on_plateau"},
    ):
        cfg = Config.model_construct(**{**Config().model_dump(), "output_dir": "out", **values})  # unvalidated
        with pytest.raises(ValueError):
            TrainingArguments(**training_arguments_kwargs(cfg, []))


def test_run_rules_are_the_boards_and_the_trainers():
    """A ppo/grpo run needs a reward: a Config without one still builds (plan, data stats), the board refuses it at
    its fields, and the trainer's check raises the same problem."""
    from tunekit.config.schema import run_problems
    from tunekit.train.stages.rollout import check_rewards
    from tunekit.webui.validation import validate

    message = (
        "stage grpo needs a reward: set reward_funcs (package.module:function) or reward_model (a folder saved "
        "by stage rm)."
    )
    cfg = build_config({"stage": "grpo"})
    assert [(p.message, p.fields) for p in run_problems(cfg)] == [(message, ("reward_funcs", "reward_model", "stage"))]
    check = validate({"stage": "grpo"})
    assert (
        not check.ok and check.message == message and set(check.by_field) == {"reward_funcs", "reward_model", "stage"}
    )
    with pytest.raises(ConfigError) as caught:
        check_rewards(cfg, [], None)
    assert str(caught.value) == message and caught.value.problems[0].fields == (
        "reward_funcs",
        "reward_model",
        "stage",
    )
    assert validate({"stage": "grpo", "reward_funcs": "tests.stage_helpers:ascii_share"}).ok
    assert (
        validate({"stage": "ppo", "reward_model": "saves/rm"}).ok
        and validate({"stage": "grpo", "do_predict": True}).ok
    )
    assert list(run_problems(build_config({"stage": "sft"}))) == []


def test_the_board_reads_the_deepspeed_presets_from_config(tmp_path):
    """The board's path policy takes a preset as a preset, not a path, from config/engines.py's one list (it had a
    copy without z1)."""
    from tunekit.config import engines
    from tunekit.webui import paths

    assert paths.DEEPSPEED_PRESETS is engines.DEEPSPEED_PRESETS
    policy = paths.PathPolicy(tmp_path)
    assert all(policy.problems({"deepspeed": preset}) == [] for preset in engines.DEEPSPEED_PRESETS)
    assert [option for option, _ in policy.problems({"deepspeed": "/etc/ds.json"})] == ["deepspeed"]
