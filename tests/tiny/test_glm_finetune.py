"""LoRA and freeze on the tiny GLM-4 (Glm4ForCausalLM) find its layers by structure: ``lora_target: all`` adapts
every linear layer but the LM head (the fused gate_up_proj included), as LLaMA-Factory's ``find_all_linear_modules``
picks them, and ``freeze_trainable_layers: N`` trains exactly the last N decoder layers. A 2-step SFT run of each
trains, saves, and reloads in plain transformers / peft with the logits of the end of training."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import alpaca_records, base_config, write_dataset
from tunekit.config import load_config
from tunekit.tiny.text import build_tiny_model

LAYERS = 3
IDS = torch.tensor([[2, 4, 7, 30, 41, 52, 63, 8]])  # [gMASK] <sop> <|user|> ... <|assistant|>


@pytest.fixture(scope="module")
def glm4(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("glm4") / "model", like="glm4", seed=0, num_layers=LAYERS)


def _trainer(model_dir, tmp_path, **opts):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.arguments import build_training_arguments
    from tunekit.train.stages import sft

    data = tmp_path / "data"
    write_dataset(data, "toy", alpaca_records(8))
    options = dict(template="glm4", max_steps=2, learning_rate=1e-2, gradient_checkpointing=False, **opts)
    cfg = load_config(None, base_config(model_dir, data, tmp_path / "out", **options))
    tokenizer = load_tokenizer(cfg)
    prepared = prepare_datasets(cfg, tokenizer, "sft")
    model = load_model(cfg, tokenizer)
    return sft.build_trainer(cfg, build_training_arguments(cfg, []), model, tokenizer, prepared, [])


def _layer_linears(model_dir) -> list[str]:
    """Every nn.Linear of the plain transformers model but the LM head: what LLaMA-Factory's ``lora_target: all``
    adapts (its find_all_linear_modules skips only lm_head, and ChatGLM's output_layer)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return sorted(n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head")


def test_decoder_layers_are_found_by_structure(glm4):
    from transformers import AutoModelForCausalLM

    from tunekit.model.layers import decoder_layers

    model = AutoModelForCausalLM.from_pretrained(glm4)
    layers = decoder_layers(model)
    assert [type(m).__name__ for m in layers] == ["Glm4DecoderLayer"] * LAYERS
    assert all(a is b for a, b in zip(layers, model.model.layers, strict=True))


def test_lora_all_adapts_every_linear_but_the_head_and_reloads_in_plain_peft(glm4, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer = _trainer(glm4, tmp_path, finetuning_type="lora", lora_target="all", lora_rank=4)
    adapted = sorted(
        n.removeprefix("base_model.model.") for n, m in trainer.model.named_modules() if hasattr(m, "lora_A")
    )
    linears = _layer_linears(glm4)
    assert adapted == linears and len(linears) == 6 * LAYERS  # q, k, v, o, gate_up, down in each layer
    trained = sorted(n for n, p in trainer.model.named_parameters() if p.requires_grad)
    assert trained == sorted(f"base_model.model.{n}.lora_{ab}.default.weight" for n in linears for ab in "AB")
    trainer.train()
    out = tmp_path / "adapter"
    trainer.save_model(str(out))
    saved = json.loads((out / "adapter_config.json").read_text())
    names = {t.split(".")[-1] for t in saved["target_modules"]}  # last names, or full paths (of linears only)
    assert names == {"down_proj", "gate_up_proj", "k_proj", "o_proj", "q_proj", "v_proj"}
    assert all("." not in t or t in linears for t in saved["target_modules"])
    with torch.no_grad():
        end = trainer.model.eval()(input_ids=IDS).logits
        base = AutoModelForCausalLM.from_pretrained(glm4, dtype=torch.float32).eval()
        base_logits = base(input_ids=IDS).logits
        plain = PeftModel.from_pretrained(base, str(out)).eval()(input_ids=IDS).logits
    assert (plain - base_logits).abs().max() > 1e-3  # the 2 steps changed the model
    assert torch.equal(plain, end)  # the same float32 operations on the same saved numbers


def test_freeze_trains_the_last_layers_and_reloads_in_plain_transformers(glm4, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer = _trainer(glm4, tmp_path, finetuning_type="freeze", freeze_trainable_layers=2)
    trained = sorted(n for n, p in trainer.model.named_parameters() if p.requires_grad)
    base = AutoModelForCausalLM.from_pretrained(glm4, dtype=torch.float32).eval()
    expected = sorted(n for n, _ in base.named_parameters() if n.startswith(("model.layers.1.", "model.layers.2.")))
    assert trained == expected and len(expected) == 2 * 13  # per layer: 6 linear weights, q/k/v biases, 4 norms
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = sorted(n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n]))
    assert changed == expected  # layer 0, the embeddings, the final norm and the head stay as they were
    out = tmp_path / "freeze"
    trainer.save_model(str(out))
    reloaded, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    assert type(reloaded).__name__ == "Glm4ForCausalLM" and not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        end = trainer.model.eval()(input_ids=IDS).logits
        assert (end - base(input_ids=IDS).logits).abs().max() > 1e-3
        assert torch.equal(reloaded.eval()(input_ids=IDS).logits, end)
