"""The board's form is generated from the schema: every option has a widget, and form ⇄ config and
preview command ⇄ resolved config are exact round trips (for every option of the schema)."""

from __future__ import annotations

import shlex
from typing import Any, Literal

import pytest
from pydantic import Field

from tunekit.config import Config, build_config, config_to_dict, load_config
from tunekit.config.options.base import OptionGroup
from tunekit.errors import ConfigError
from tunekit.webui.board import Board
from tunekit.webui.command import command_line, format_value, override_args, yaml_text
from tunekit.webui.fields import FieldSpec, config_to_form, defaults_form, field_specs, form_to_values, to_form
from tunekit.webui.sections import sections, tab_of
from tunekit.webui.validation import validate

SPECS = field_specs()

# Settings some options need before they are valid (cross-field rules); tried in order.
CONTEXTS: list[dict[str, Any]] = [
    {},
    {"finetuning_type": "freeze"},
    {"packing": True},
    {"mix_strategy": "interleave_under"},
    {"val_size": 0.1},
    {"eval_strategy": "steps", "val_size": 0.1},
    {"packing": True, "flash_attn": "sdpa"},
    {"lr_scheduler_type": "cosine_with_min_lr"},  # lr_scheduler_kwargs are checked against the scheduler
    {"pissa_init": True},  # pissa_convert converts a PiSSA adapter
    # the optimizer options apply to full fine-tuning with their optimizer on; OFT's to finetuning_type oft
    {"finetuning_type": "full", "use_galore": True},
    {"finetuning_type": "full", "use_apollo": True},
    {"finetuning_type": "full", "use_badam": True},
    {"finetuning_type": "full", "use_badam": True, "badam_mode": "ratio", "max_grad_norm": 0},
    {"finetuning_type": "oft"},
    {"use_eaft_loss": True},
    {"use_asft_loss": True},
    {"finetuning_type": "full"},
    {"fp8": True},
    {"fp8": True, "fsdp": "full_shard"},
    {"cutoff_len": 4},  # max_tokens_per_batch must hold one sample of cutoff_len tokens
    {"finetuning_type": "ptuning"},
    {"finetuning_type": "ptuning", "prefix_projection": True},
    {"finetuning_type": "prompt"},
    {"export_format": "gguf"},  # export_gguf_type applies to a GGUF export only
    {"new_special_tokens_config": "tokens.yaml"},  # init_special_tokens desc_init starts from its descriptions
]


def candidates(spec: FieldSpec) -> list[Any]:
    """Non-default values of the option's type (the first valid one is used)."""
    d = spec.default
    if spec.kind == "bool":
        return [not d]
    if spec.kind == "tristate":
        return [True, False]
    if spec.kind == "choice":
        return [c for c in spec.choices if c != d]
    if spec.kind == "int":
        return [d + 1 if isinstance(d, int) else 3, 7]
    if spec.kind == "float":
        return [(d or 0.0) + 0.25, 0.5]
    if spec.kind == "multi":
        return ["alpaca_en,my data", "one"]
    if spec.kind == "text":
        return ["saves/some dir/x", "tensorboard", "z2", "full_shard"]  # full_shard: fsdp's words are checked
    return [{"min_lr_rate": 0.1}, True, "saves/ckpt-5", {"alpaca_en": {"size": 2}}]  # the last: dataset_sampling


# Options the schema accepts only at their default (LLaMA-Factory configs load; any other value is refused with what to
# use instead): no other value has a round trip (test_only_default_options_refuse_every_other_value keeps this true).
ONLY_DEFAULT = ("use_v1_kernels", "cp_mode")  # cp_mode: ulysses is its one value, as in LLaMA-Factory v1
ROUND_TRIP = [s for s in SPECS if s.name not in ONLY_DEFAULT]


def sample_config(spec: FieldSpec) -> tuple[Config, dict[str, Any]]:
    for value in candidates(spec):
        for ctx in CONTEXTS:
            values = {**ctx, spec.name: value}
            try:
                return build_config(values), values
            except ConfigError:
                continue
    raise AssertionError(f"no valid non-default sample for option {spec.name} ({spec.kind})")


def test_every_option_has_a_widget_on_some_tab():
    assert sorted(s.name for s in SPECS) == sorted(Config.model_fields)
    placed = {s.name for tab in ("train", "chat", "export") for sec in sections(SPECS, tab).values() for s in sec}
    assert placed == set(Config.model_fields)
    kinds = {s.kind for s in SPECS}
    assert kinds <= {"bool", "tristate", "choice", "int", "float", "text", "yaml", "multi"}
    by = {s.name: s for s in SPECS}
    assert (by["stage"].kind, by["packing"].kind, by["lora_alpha"].kind, by["learning_rate"].kind) == (
        "choice",
        "tristate",
        "int",
        "float",
    )
    assert (by["lr_scheduler_kwargs"].kind, by["resume_from_checkpoint"].kind, by["dataset"].kind) == (
        "yaml",
        "yaml",
        "multi",
    )
    assert by["quantization_bit"].choice_labels == ["", "4", "8"]
    assert (
        tab_of(by["temperature"]) == "chat"
        and tab_of(by["export_dir"]) == "export"
        and tab_of(by["lora_rank"]) == "train"
    )
    train_sections = list(sections(SPECS, "train"))
    assert train_sections[:5] == ["model", "data", "method", "lora", "freeze"]
    assert {"quantization", "acceleration", "distributed", "logging", "rlhf"} <= set(train_sections)


def test_defaults_form_sets_nothing():
    form = defaults_form(SPECS)
    assert form_to_values(SPECS, form) == {}
    assert config_to_dict(build_config(form_to_values(SPECS, form))) == config_to_dict(Config())


def test_only_default_options_refuse_every_other_value():
    for spec in (s for s in SPECS if s.name in ONLY_DEFAULT):
        for value in candidates(spec):
            with pytest.raises(ConfigError, match=spec.name):
                build_config({spec.name: value})


def test_form_round_trip_every_option():
    """config → widget values → config is the identity, for a non-default value of every option."""
    for spec in ROUND_TRIP:
        cfg, values = sample_config(spec)
        form = config_to_form(SPECS, cfg)
        back = form_to_values(SPECS, form)
        assert back[spec.name] == values[spec.name], spec.name
        assert config_to_dict(build_config(back)) == config_to_dict(cfg), spec.name


def test_round_trip_through_the_gradio_widgets():
    """What a widget sends back (preprocess of what it was given) reads as the same config."""
    gr = pytest.importorskip("gradio")
    from tunekit.webui.form import make_widget

    with gr.Blocks():
        widgets = {s.name: make_widget(s, "en", templates=["qwen", "llama3"]) for s in SPECS}

    def through(name, value):
        return widgets[name].preprocess(widgets[name].postprocess(value))

    defaults = {name: through(name, value) for name, value in defaults_form(SPECS).items()}
    assert form_to_values(SPECS, defaults) == {}
    for spec in ROUND_TRIP:
        cfg, values = sample_config(spec)
        sent = dict(defaults)
        for name in values:  # the option and the context it needs
            sent[name] = through(name, to_form(next(s for s in SPECS if s.name == name), getattr(cfg, name)))
        assert config_to_dict(build_config(form_to_values(SPECS, sent))) == config_to_dict(cfg), spec.name


def test_command_resolves_to_the_same_config_for_every_option(tmp_path):
    for spec in ROUND_TRIP:
        cfg, _ = sample_config(spec)
        values = form_to_values(SPECS, config_to_form(SPECS, cfg))
        argv = shlex.split(command_line(values))
        assert argv[:2] == ["tunekit", "train"]
        assert config_to_dict(load_config(None, argv[2:])) == config_to_dict(cfg), spec.name
        path = tmp_path / f"{spec.name}.yaml"
        path.write_text(yaml_text(values))
        assert config_to_dict(load_config(path)) == config_to_dict(cfg), spec.name


def test_preview_command_equals_board_start_config(tmp_path):
    """Tricky values: YAML-looking strings, spaces, comments, exponents, dicts, multi-picks."""
    board = Board(cwd=tmp_path)
    form = board.defaults()
    form.update(
        {
            "model_name_or_path": "models/my model",
            "template": "qwen",
            "dataset": ["alpaca_en", "mine"],
            "run_name": "true",
            "default_system": "You are: helpful # not a comment",
            "learning_rate": "2e-5",
            "lr_scheduler_type": "cosine_with_min_lr",
            "lr_scheduler_kwargs": "{min_lr_rate: 0.1}",
            "resume_from_checkpoint": "true",
            "lora_target": "q_proj,v_proj",
            "max_samples": "100",
            "cutoff_len": "512",
            "packing": "false",
            "quantization_bit": "4",
            "bf16": True,
            "output_dir": "saves/run 1",
            "logging_steps": "5",
            "adam_epsilon": "1e-08",
            "model_revision": "0123",
        }
    )
    check, cmd, yml = board.preview(form)
    assert check.ok, check.message
    assert "learning_rate=2e-05" in cmd and "'run_name=\"true\"'" in cmd
    started = check.config  # what start_train validates and runs (same values, same override_args)
    argv = shlex.split(cmd)
    assert argv[2:] == override_args(board.values(form))
    from_cli = load_config(None, argv[2:])
    assert config_to_dict(from_cli) == config_to_dict(started)
    assert from_cli.run_name == "true" and from_cli.resume_from_checkpoint is True
    assert from_cli.lr_scheduler_kwargs == {"min_lr_rate": 0.1} and from_cli.dataset == "alpaca_en,mine"
    assert from_cli.model_revision == "0123" and from_cli.packing is False and from_cli.quantization_bit == 4
    # Save / Load YAML reproduce the form
    saved = board.save_yaml(form, "cfgs/board.yaml")
    assert saved == tmp_path / "cfgs" / "board.yaml"
    assert board.values(board.load_yaml("cfgs/board.yaml")) == board.values(form)
    assert yml == saved.read_text()


def test_format_value_survives_the_cli_parser():
    from tunekit.config import parse_scalar

    for value in [
        "true",
        "null",
        "1.5",
        "5e-5",
        " padded ",
        "a: b",
        "# x",
        "",
        "中文",
        0.1,
        1e-8,
        3,
        True,
        None,
        {"a": [1, 2]},
    ]:
        assert parse_scalar(format_value(value)) == value, value


def test_validation_messages_land_on_their_fields():
    board = Board()
    form = board.defaults()
    form.update({"bf16": True, "fp16": True, "learning_rate": "-1"})
    check = validate(board.values(form))
    assert not check.ok
    assert set(check.by_field) == {"learning_rate"}  # field errors come first; pydantic stops there
    assert "greater than 0" in check.by_field["learning_rate"][0]
    form["learning_rate"] = "1e-4"
    check = validate(board.values(form))
    assert set(check.by_field) == {"bf16", "fp16"}
    assert "choose one mixed-precision mode" in check.by_field["bf16"][0]
    form.update({"bf16": False, "fp16": False, "finetuning_type": "full", "lora_rank": "16"})
    check = validate(board.values(form))
    assert set(check.by_field) == {"lora_rank", "finetuning_type"}
    assert "is a LoRA option" in check.message
    form["max_samples"] = "many"
    assert "max_samples" in validate(board.values(form)).by_field


class _NewOptions(OptionGroup):
    GROUP = "brand_new"
    TITLE = "Brand-new options"

    shiny_mode: Literal["a", "b"] | None = Field(None, description="A new choice.")
    shiny_scale: float = Field(1.5, gt=0, description="A new number.")
    shiny_map: dict[str, int] | None = Field(None, description="A new mapping.")
    shiny_count: int = Field(2, description="A new count.")


def test_a_new_option_group_appears_without_board_code():
    specs = field_specs(groups=[_NewOptions])
    assert [(s.name, s.kind) for s in specs] == [
        ("shiny_mode", "choice"),
        ("shiny_scale", "float"),
        ("shiny_map", "yaml"),
        ("shiny_count", "int"),
    ]
    secs = sections(specs, "train")
    assert list(secs) == ["brand_new"] and len(secs["brand_new"]) == 4
    form = defaults_form(specs)
    form.update({"shiny_mode": "b", "shiny_map": "{x: 3}", "shiny_count": "5"})
    assert form_to_values(specs, form) == {"shiny_mode": "b", "shiny_map": {"x": 3}, "shiny_count": 5}
    gr = pytest.importorskip("gradio")
    from tunekit.webui.form import FormView

    with gr.Blocks():
        view = FormView(specs)
        view.render("en", "train")
    assert list(view.comps) == [s.name for s in specs]
    assert view.accordions[0][0].label == "Brand-new options"


def test_a_deepspeed_file_contradicting_the_options_is_an_error_at_its_field(tmp_path):
    """The board applies the check ``tunekit train`` makes before launch (train/preflight.py): every contradiction
    between the DeepSpeed file (relative paths read in the workspace, where the job runs) and the options."""
    import json

    (tmp_path / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5, "zero_optimization": {"stage": 2}})
    )
    board = Board(cwd=tmp_path)
    form = board.defaults()
    form.update(
        {
            "model_name_or_path": "Qwen/Qwen2.5-0.5B",
            "dataset": "alpaca_en_demo",
            "deepspeed": "ds.json",
            "per_device_train_batch_size": "1",
        }
    )
    check = board.validate(board.values(form))
    expected = (
        "deepspeed: ds.json contradicts tunekit's options in 2 place(s): (1) train_micro_batch_size_per_gpu is 2 "
        "but per_device_train_batch_size is 1; (2) gradient_clipping is 0.5 but max_grad_norm is 1.0. Set each "
        'of these fields to "auto" (recommended: tunekit\'s options fill them) or make both agree.'
    )
    assert not check.ok and check.by_field == {"deepspeed": [expected]} and check.message == expected
    form.update({"per_device_train_batch_size": "2", "max_grad_norm": "0.5"})
    assert board.validate(board.values(form)).ok
    form["deepspeed"] = "z3"  # a preset: "auto" everywhere
    assert board.validate(board.values(form)).ok


def test_whole_step_counts_and_sizes_from_the_widgets_are_ints_in_the_command_yaml_and_run(tmp_path, monkeypatch):
    """A whole number typed into a field, or sent by a number box as a float (5.0), is an int in the previewed command,
    the YAML and the job's argv wherever the option counts steps or samples (``logging_steps=5``, never ``5.0``); a
    fraction of a step option and a float option stay as they are."""
    board = Board(cwd=tmp_path)
    form = {
        "model_name_or_path": "m",
        "logging_steps": "5",
        "save_steps": 20.0,
        "max_steps": "30",
        "per_device_train_batch_size": 4.0,
        "warmup_steps": "0.1",
        "learning_rate": "1e-4",
    }
    check, cmd, yml = board.preview(form)
    args = [
        "model_name_or_path=m",
        "learning_rate=0.0001",
        "max_steps=30",
        "per_device_train_batch_size=4",
        "warmup_steps=0.1",
        "save_steps=20",
        "logging_steps=5",
    ]
    assert check.ok and cmd == "tunekit train " + " ".join(args)
    assert yml == (
        "model_name_or_path: m\nlearning_rate: 0.0001\nmax_steps: 30\nper_device_train_batch_size: 4\n"
        "warmup_steps: 0.1\nsave_steps: 20\nlogging_steps: 5\n"
    )
    started = []
    monkeypatch.setattr(board.runner, "start", lambda verb, argv, *a, **kw: started.append((verb, argv)))
    board.start_train(form)
    assert started == [("train", args)]
    # a config read back into the form (its float options shown with their point) previews the same command
    loaded = board.form_from_config(build_config(board.values(form)))
    assert loaded["logging_steps"] == "5.0" and board.preview(loaded)[1] == cmd
