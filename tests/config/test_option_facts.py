"""Option facts are declared on the fields (config/options/facts.py) and everything else reads them: the
finetuning-type lists and switches the schema's rules use, the board's sections, and one help line / default
format shared by the CLI help, the board and docs/options.md."""

from __future__ import annotations

import pytest

from tunekit.config import Config
from tunekit.config.options import FREEZE_ONLY, LORA_ONLY, OFT_ONLY, SWITCHED, options_only_for
from tunekit.config.options.facts import OptionFacts, format_default, option, option_facts, option_help, option_note


def test_method_lists_and_switches_are_read_from_the_fields():
    assert LORA_ONLY == (
        "lora_rank",
        "lora_alpha",
        "lora_dropout",
        "lora_target",
        "additional_target",
        "use_rslora",
        "use_dora",
        "pissa_init",
        "pissa_iter",
        "pissa_convert",
        "loraplus_lr_ratio",
        "create_new_adapter",
    )
    assert FREEZE_ONLY == ("freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules")
    assert OFT_ONLY == ("oft_rank", "oft_block_size", "oft_target", "module_dropout")
    assert options_only_for("ptuning") == ("pre_seq_len", "prefix_projection", "prefix_hidden_size")
    assert options_only_for("prompt") == ("num_virtual_tokens",)
    assert SWITCHED == {
        "use_galore": (
            "galore_target",
            "galore_rank",
            "galore_update_interval",
            "galore_scale",
            "galore_proj_type",
            "galore_layerwise",
        ),
        "use_apollo": (
            "apollo_target",
            "apollo_rank",
            "apollo_update_interval",
            "apollo_scale",
            "apollo_proj",
            "apollo_proj_type",
            "apollo_scale_type",
            "apollo_layerwise",
            "apollo_scale_front",
        ),
        "use_badam": (
            "badam_mode",
            "badam_start_block",
            "badam_switch_mode",
            "badam_switch_interval",
            "badam_update_ratio",
            "badam_mask_mode",
            "badam_verbose",
        ),
        "fp8": ("fp8_backend", "fp8_enable_fsdp_float8_all_gather"),
        "use_eaft_loss": ("eaft_alpha",),
        "use_asft_loss": ("asft_alpha",),
        "prefix_projection": ("prefix_hidden_size",),
    }
    for switch in SWITCHED:
        assert Config.model_fields[switch].annotation is bool, switch
    fields = Config.model_fields
    assert option_facts(fields["lora_rank"]) == OptionFacts(section="lora", only="lora")
    assert option_facts(fields["ppo_buffer_size"]) == OptionFacts(status="ignored")
    assert option_facts(fields["learning_rate"]) == OptionFacts()


def test_board_sections_come_from_the_fields():
    from tunekit.webui.fields import field_specs

    by = {s.name: s for s in field_specs()}
    assert [
        by[n].section
        for n in (
            "lora_rank",
            "freeze_extra_modules",
            "quantization_bit",
            "flash_attn",
            "torch_compile",
            "oft_rank",
            "learning_rate",
        )
    ] == ["lora", "freeze", "quantization", "acceleration", "acceleration", "optimizers", "training"]


def test_one_help_line_and_default_format_for_cli_board_and_docs():
    from tunekit.cli.options_help import format_options_help
    from tunekit.config.options import MethodOptions, RLHFOptions
    from tunekit.config.options_doc import render_options_markdown
    from tunekit.webui.fields import field_specs

    assert [format_default(v) for v in (True, False, None, 5e-05, 2048, "all", "", {"a": 1})] == [
        "true",
        "false",
        "",
        "5e-05",
        "2048",
        "all",
        '""',
        '{"a": 1}',
    ]
    by = {s.name: s for s in field_specs()}
    line = "LoRA rank r. (LoRA only) [default: 8]"
    assert by["lora_rank"].help() == line
    assert f"  --lora_rank\n      {line}\n" in format_options_help([MethodOptions])
    assert "| `lora_rank` | int | `8` | *LoRA only.* LoRA rank r. |" in render_options_markdown().splitlines()
    assert (
        by["galore_rank"].help() == "GaLore: rank of the projected gradients. (needs use_galore: true) [default: 16]"
    )
    assert (
        by["lora_alpha"].help() == "LoRA scale alpha (default: 2 x lora_rank). (LoRA only)"
    )  # null: no default shown
    ignored = (
        "PPO: LLaMA-Factory's rollout buffer; tunekit rolls out each micro-batch and reuses it ppo_epochs times. "
        "(accepted for LLaMA-Factory configs, ignored) [default: 1]"
    )
    assert by["ppo_buffer_size"].help() == ignored
    assert (
        " ".join(format_options_help([RLHFOptions]).split("--ppo_buffer_size\n", 1)[1].split("\n  --")[0].split())
        == ignored
    )
    assert option_note(OptionFacts(only="freeze", needs="use_badam", status="ignored"), "zh") == (
        "仅用于 freeze; 需要 use_badam: true; 为兼容 LLaMA-Factory 配置而接受，不起作用"
    )
    assert option_help("说明。", 8, OptionFacts(only="lora"), "zh") == "说明。 (仅用于 LoRA) [默认: 8]"


def test_a_misspelt_fact_fails_where_the_option_is_declared():
    with pytest.raises(ValueError, match=r"option\(only='qlora'\): use one of lora, freeze, oft"):
        option(1, description="x", only="qlora")
    with pytest.raises(ValueError, match=r"option\(status='deprecated'\): use one of ignored"):
        option(1, description="x", status="deprecated")
