"""finetuning_type: oft through peft's OFT: the model is unchanged before training, the saved adapter loads in plain
peft and gives tunekit's logits, and the planner counts exactly the trainable parameters peft creates."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config


def test_oft_trains_and_the_adapter_loads_in_plain_peft(tiny_qwen, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tunekit.flow import run_train
    from tunekit.model.loader import load_model, load_tokenizer

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    out = tmp_path / "oft"
    opts = dict(finetuning_type="oft", oft_block_size=16, max_steps=3, learning_rate=1e-2)
    run_train(load_config(None, base_config(tiny_qwen, data, out, **opts)))
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert (adapter["peft_type"], adapter["oft_block_size"], adapter["r"]) == ("OFT", 16, 0)

    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits
        plain = PeftModel.from_pretrained(base, str(out)).eval()
        peft_logits = plain(input_ids=ids).logits
    cfg = load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen),
            "template": "qwen",
            "adapter_name_or_path": str(out),
            "finetuning_type": "oft",
        },
    )
    merged = load_model(cfg, load_tokenizer(cfg), is_trainable=False).eval()  # tunekit's inference path merges it
    with torch.no_grad():
        merged_logits = merged(input_ids=ids).logits
    assert (peft_logits - base_logits).abs().max() > 1e-3  # training changed the model
    # Merging folds each orthogonal block into W (W R instead of (x R) W): fp32 rounding of a 16-term and a
    # 64/256-term dot product per layer, ~2 layers x 256 x 6e-8 relative on logits of size < 5: below 2e-4.
    assert torch.allclose(merged_logits, peft_logits, atol=2e-4, rtol=0)


def test_oft_is_identity_before_training_and_planned_exactly(tiny_qwen, tmp_path):
    from transformers import AutoModelForCausalLM

    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.plan.architectures import load_shape
    from tunekit.plan.params import count_params
    from tunekit.plan.training_setup import resolve_setup

    # oft_rank alone: it wins over oft_block_size's default (peft takes exactly one of the two)
    for opts in (dict(oft_block_size=16), dict(oft_rank=4, oft_target="q_proj,down_proj")):
        cfg = load_config(
            None, {"model_name_or_path": str(tiny_qwen), "template": "qwen", "finetuning_type": "oft", **opts}
        )
        model = load_model(cfg, load_tokenizer(cfg)).eval()
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert count_params(load_shape(None, str(tiny_qwen)), resolve_setup(cfg)).trainable == trainable > 0
        ids = torch.tensor([[2, 4, 6, 8]])
        base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
        with torch.no_grad():
            assert torch.equal(model(input_ids=ids).logits, base(input_ids=ids).logits)  # R = I exactly (Cayley of 0)


def test_oft_options_need_finetuning_type_oft():
    from tunekit.errors import ConfigError

    with pytest.raises(
        ConfigError, match="oft_block_size is an OFT option but finetuning_type is 'lora': set finetuning_type: oft"
    ):
        load_config(None, {"oft_block_size": 16})


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (
            dict(oft_block_size=48),
            "oft_block_size 48 does not divide the input width of every adapted layer (widths 64, 256; "
            "not 64, 256): peft would change it layer by layer. Set oft_block_size to a divisor of all of "
            "them (1, 2, 4, 8, 16, 32, 64), or narrow oft_target.",
        ),
        (
            dict(oft_block_size=0, oft_rank=3, oft_target="down_proj"),
            "oft_rank 3 does not divide the input width of every adapted layer (widths 256; not 256): peft would "
            "change it layer "
            "by layer. Set oft_rank to a divisor of all of them (1, 2, 4, 8, 16, 32, 64, 128, 256), or narrow "
            "oft_target.",
        ),
    ],
)
def test_a_block_size_that_does_not_divide_the_layers_is_refused_before_training(opts, message, tiny_qwen, tmp_path):
    """peft used to replace it by another size per layer with a warning (48 -> 64 on the 64-wide layers, 32 on the
    256-wide ones) and train that."""
    from tunekit.errors import ConfigError
    from tunekit.flow import run_train

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(4))
    out = tmp_path / "oft"
    cfg = load_config(None, base_config(tiny_qwen, data, out, finetuning_type="oft", max_steps=1, **opts))
    with pytest.raises(ConfigError) as err:
        run_train(cfg)
    assert str(err.value) == message
    assert not out.exists() or not any(out.iterdir())  # nothing written
    from tunekit.plan import make_plan

    with pytest.raises(ConfigError) as err:  # the plan refuses what the run refuses, by the same rule
        make_plan(cfg, gpu_memory_gib=80, num_samples=4, seq_len=32)
    assert str(err.value) == message
