"""`tunekit export` of a prefix (P-Tuning v2) or prompt-tuning adapter: it says the adapter cannot be merged, writes
the adapter with a reference to its base (no model weights, no config.json), plain peft loads it on that base, and
`tunekit verify` checks base + adapter (and catches an exported adapter that differs from the trained one)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.prompt_adapter_helpers import peft_prompt_model
from tunekit.config import load_config

KINDS = {"ptuning": "PREFIX_TUNING", "prompt": "PROMPT_TUNING"}


@pytest.fixture(scope="module", params=list(KINDS))
def trained(request, tiny_qwen, tmp_path_factory):
    """(kind, adapter folder): a PEFT prefix / prompt adapter with non-trivial values, saved as training saves it."""
    kind = request.param
    model = peft_prompt_model(tiny_qwen, kind)
    with torch.no_grad():
        for p in model.prompt_encoder.parameters():
            p.normal_(0.0, 0.5)
    folder = tmp_path_factory.mktemp(f"{kind}-adapter") / "adapter"
    model.save_pretrained(str(folder))
    return kind, folder


def _cfg(tiny_qwen, adapter, out, **over):
    return load_config(
        None,
        {
            "model_name_or_path": str(tiny_qwen),
            "adapter_name_or_path": str(adapter),
            "template": "qwen",
            "export_dir": str(out),
            **over,
        },
    )


def test_export_writes_the_adapter_with_its_base_and_says_why(trained, tiny_qwen, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tunekit.export import export_model

    kind, adapter = trained
    out = tmp_path / "export"
    export_model(_cfg(tiny_qwen, adapter, out), verify=True)
    printed = capsys.readouterr().out
    base = str(tiny_qwen.resolve())
    assert (
        f"{adapter} is a {KINDS[kind]} adapter: a prefix or prompt adapter adds trained keys/values or virtual "
        "tokens, it changes no weight, so it cannot be merged into the model's weights. Writing the adapter to "
        f"{out.resolve()} with a reference to its base model {base} instead (no merged model)"
    ) in printed
    assert f"verify {out.resolve()}: OK" in printed and "adapter_logits" in printed
    # peft's own generate drops a prefix with transformers 5 at the first step already (a prompt goes wrong later)
    assert ("note: plain peft's generate does not apply this adapter" in printed) is (kind == "ptuning")
    assert sorted(p.name for p in out.iterdir() if "token" not in p.name and p.suffix != ".jinja") == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "tunekit_export.json",
    ]  # no config.json, no model weights: nothing pretends to be a fine-tuned model
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["peft_type"], config["base_model_name_or_path"]) == (KINDS[kind], base)
    provenance = json.loads((out / "tunekit_export.json").read_text())
    assert (provenance["kind"], provenance["merged"], provenance["base"]) == ("prompt_adapter", False, base)

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template  # the template travels with the adapter
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]), out)
        trained_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), str(adapter))
        assert torch.equal(plain(input_ids=ids).logits, trained_model(input_ids=ids).logits)


def test_verify_catches_an_exported_adapter_that_is_not_the_trained_one(trained, tiny_qwen, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    from tunekit.cli import verify_cmd
    from tunekit.export import export_model

    _, adapter = trained
    out = tmp_path / "export"
    export_model(_cfg(tiny_qwen, adapter, out), verify=False)
    assert verify_cmd.main([str(out)]) == 0  # the base and the trained adapter found from tunekit_export.json
    weights = load_file(str(out / "adapter_model.safetensors"))
    save_file({k: v * 0.5 for k, v in weights.items()}, str(out / "adapter_model.safetensors"))
    capsys.readouterr()
    assert verify_cmd.main([str(out)]) == 1
    assert "problem: max |exported - trained adapter| = " in capsys.readouterr().out


def test_what_a_prefix_export_cannot_do_is_refused_before_writing(trained, tiny_qwen, tmp_path):
    from tunekit.errors import ConfigError
    from tunekit.export import export_model

    kind, adapter = trained
    out = tmp_path / "export"
    with pytest.raises(ConfigError) as err:
        export_model(_cfg(tiny_qwen, adapter, out, export_quantization_bit=4))
    assert str(err.value) == (
        f"export_quantization_bit 4 quantizes merged weights, and {adapter} is a {KINDS[kind]} adapter, which is "
        "not merged: remove export_quantization_bit (the adapter is exported with a reference to its base; quantize "
        "the base model on its own if needed)."
    )
    assert not out.exists()
