"""Every example config under examples/optimizers/ is a valid tunekit config, and the option sets of LLaMA-Factory's
own examples for these features (examples/extras/{galore,apollo,badam,muon,adam_mini,oft,llama_pro,dft,eaft}) load."""

from __future__ import annotations

import pytest

from tests.helpers import LLAMAFACTORY_INPUTS, ROOT
from tunekit.config import load_config

EXAMPLES = sorted((ROOT / "examples" / "optimizers").glob("*.yaml"))

# The method options of LLaMA-Factory's example configs, as they are written there.
LLAMAFACTORY = {
    "galore/llama3_full_sft": dict(
        finetuning_type="full",
        use_galore=True,
        galore_layerwise=True,
        galore_target="mlp,self_attn",
        galore_rank=128,
        galore_scale=2.0,
        pure_bf16=True,
    ),
    "apollo/llama3_full_sft": dict(
        finetuning_type="full",
        use_apollo=True,
        apollo_layerwise=True,
        apollo_target="mlp,self_attn",
        apollo_rank=128,
        apollo_scale=32.0,
        apollo_scale_type="channel",
        pure_bf16=True,
    ),
    "badam/llama3_full_sft": dict(
        finetuning_type="full",
        use_badam=True,
        badam_mode="layer",
        badam_switch_mode="ascending",
        badam_switch_interval=50,
        badam_verbose=2,
        gradient_accumulation_steps=8,
    ),
    "muon/qwen2_full_sft": dict(finetuning_type="full", use_muon=True),
    "adam_mini/qwen2_full_sft": dict(finetuning_type="full", use_adam_mini=True),
    "oft/llama3_oft_sft": dict(finetuning_type="oft", oft_block_size=32, oft_rank=0, oft_target="all"),
    "llama_pro/llama3_freeze_sft": dict(
        finetuning_type="freeze", use_llama_pro=True, freeze_trainable_layers=8, freeze_trainable_modules="all"
    ),
    "dft/qwen2_full_sft": dict(finetuning_type="full", use_dft_loss=True),
    "eaft/qwen25_05b_eaft_full": dict(finetuning_type="full", use_eaft_loss=True, eaft_alpha=1.0),
}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_config_loads(path):
    cfg = load_config(path)
    assert cfg.stage == "sft" and cfg.output_dir == f"saves/optimizers/{path.stem}"


def test_every_method_has_an_example():
    assert {p.stem for p in EXAMPLES} == {
        "galore_full_sft",
        "apollo_full_sft",
        "badam_full_sft",
        "muon_full_sft",
        "adam_mini_full_sft",
        "oft_sft",
        "llama_pro_freeze_sft",
        "dft_full_sft",
        "eaft_full_sft",
        "asft_full_sft",
    }


@pytest.mark.parametrize("name", list(LLAMAFACTORY))
def test_llamafactory_example_options_load(name):
    cfg = load_config(None, {"stage": "sft", "do_train": True, **LLAMAFACTORY[name]})
    assert all(getattr(cfg, k) == v for k, v in LLAMAFACTORY[name].items())


# LLaMA-Factory's examples/extras/galore/llama3_full_sft.yaml (Apache-2.0) as it is written there: transformers 5's
# fractional warmup_steps and the former name evaluation_strategy must load unchanged.
GALORE_EXAMPLE = (LLAMAFACTORY_INPUTS / "galore_llama3_full_sft.yaml").read_text(encoding="utf-8")


def test_llamafactory_galore_example_loads_unchanged(tmp_path):
    from tunekit.train.arguments import build_training_arguments

    path = tmp_path / "llama3_full_sft.yaml"
    path.write_text(GALORE_EXAMPLE, encoding="utf-8")
    cfg = load_config(path)
    assert (cfg.eval_strategy, cfg.warmup, cfg.use_galore, cfg.pure_bf16) == ("steps", (0, 0.1), True, True)
    args = build_training_arguments(cfg.model_copy(update={"output_dir": str(tmp_path / "out")}), [])
    assert args.warmup_steps == 0.1 and args.get_warmup_steps(100) == 10  # Hugging Face reads it as a ratio
