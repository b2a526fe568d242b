"""tunekit export / verify: merge -> plain transformers reload -> identical logits, shards, template parity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunekit.config import load_config
from tunekit.errors import ConfigError, ModelError

CONVERSATIONS = [
    ([{"role": "user", "content": "Hi"}], None),
    ([{"role": "user", "content": "Hi"}], "Be terse."),
    (
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "2+2?"},
        ],
        "Be terse.",
    ),
]


def _hf(messages, system):
    return ([{"role": "system", "content": system}] if system else []) + messages


def _lora(base: Path, out: Path, seed: int, targets) -> Path:
    """A real PEFT LoRA adapter with non-zero B (init_lora_weights=False), so merging visibly changes the model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    ).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapter(tiny_qwen, tmp_path_factory) -> Path:
    return _lora(tiny_qwen, tmp_path_factory.mktemp("adapter") / "lora", 0, "all-linear")


@pytest.fixture(scope="module")
def adapter2(tiny_qwen, tmp_path_factory) -> Path:
    return _lora(tiny_qwen, tmp_path_factory.mktemp("adapter2") / "lora2", 1, ["q_proj", "v_proj"])


@pytest.fixture(scope="module")
def merged(tiny_qwen, adapter, adapter2, tmp_path_factory) -> tuple[Path, dict]:
    """Two adapters, merged in order."""
    from tunekit.export import export_model
    from tunekit.export.verify import verify_export

    out = tmp_path_factory.mktemp("export") / "merged"
    cfg = load_config(
        None,
        dict(
            model_name_or_path=str(tiny_qwen),
            adapter_name_or_path=f"{adapter},{adapter2}",
            template="qwen",
            export_dir=str(out),
            export_size=0.0002,
        ),
    )  # 200 kB shards
    export_model(cfg, verify=False)
    return out, verify_export(out, base_cfg=cfg)


def test_merged_lora_reloads_with_plain_transformers_and_matches_base_plus_adapter(
    merged, tiny_qwen, adapter, adapter2
):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, report = merged
    assert report["ok"], report["problems"]
    assert (
        report["max_abs_logit_diff"] < 1e-4
    )  # verify's own float32 limit (LOGIT_TOLERANCE in src/tunekit/export/verify.py)
    assert report["adapter_effect"] > 1e-2  # the comparison is meaningful: the adapter moves the logits
    # Both sides computed in float64 (the saved float32 weights upcast exactly), so what remains is the float32 storage
    # of the merged weights W + s*BA: each element rounded by <= 2**-24 relative, which moves each logit (|logit| < 10
    # through ~15 matmuls of width <= 256) by ~15 * 2**-24 * 10 = 1e-5 at the very worst. 1e-4 keeps a tenfold margin
    # on any machine and is two orders below the adapters' own effect (> 1e-2, checked above).
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float64)
    ref = PeftModel.from_pretrained(PeftModel.from_pretrained(base, adapter).merge_and_unload(), adapter2).eval()
    ids = AutoTokenizer.from_pretrained(out)("What is 2 plus 3?", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        assert torch.allclose(model(input_ids=ids).logits, ref(input_ids=ids).logits, atol=1e-4, rtol=0)


def test_export_shards_index_and_generation_config(merged):
    from safetensors import safe_open
    from transformers import AutoTokenizer, GenerationConfig

    out, report = merged
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and all((out / f).is_file() for f in files)
    keys = []
    for f in files:
        with safe_open(str(out / f), framework="pt") as handle:
            names = list(handle.keys())
        keys += names
        assert (out / f).stat().st_size <= 200_000 + 10_000 or len(names) == 1  # a lone tensor may exceed the limit
    assert sorted(keys) == sorted(index["weight_map"])
    tok = AutoTokenizer.from_pretrained(out)
    gen = GenerationConfig.from_pretrained(out)
    eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    assert tok.convert_tokens_to_ids("<|im_end|>") in eos
    assert gen.pad_token_id == tok.pad_token_id
    provenance = json.loads((out / "tunekit_export.json").read_text())
    assert provenance["template"] == "qwen" and provenance["dtype"] == "float32"
    assert set(report["checks"]) >= {"index", "load", "shapes", "chat_template", "generate", "merged_logits"}


def test_saved_chat_template_renders_like_tunekit_for_every_template(tiny_qwen, tmp_path):
    """The export path (template -> tokenizer.chat_template -> save -> plain AutoTokenizer) for
    each registered template."""
    from transformers import AutoTokenizer

    from tunekit.data.templates import get_template, list_templates
    from tunekit.export.exporter import save_tokenizer

    checked = []
    for name in list_templates():
        if name == "jinja":
            continue
        tok = AutoTokenizer.from_pretrained(tiny_qwen)
        tpl = get_template(name, tok)
        if tpl.chat_template_jinja() is None:
            continue
        save_tokenizer(tok, tpl, tmp_path / name)
        plain = AutoTokenizer.from_pretrained(tmp_path / name)
        for messages, system in CONVERSATIONS:
            hf = _hf(messages, system)
            assert plain.apply_chat_template(hf, tokenize=False, add_generation_prompt=True) == tpl.render_prompt(
                messages, system
            ), name
        checked.append(name)
    assert len(checked) >= 15 and {"qwen", "qwen3", "llama3", "mistral", "glm4", "default"} <= set(checked)


def test_full_checkpoint_legacy_format_and_verify_cli(tiny_qwen, tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    from tunekit.cli.main import main

    out = tmp_path / "legacy"  # a full checkpoint (no adapter) re-sharded, through the CLI
    assert (
        main(
            [
                "export",
                f"model_name_or_path={tiny_qwen}",
                "template=qwen",
                f"export_dir={out}",
                "export_legacy_format=true",
                "export_size=0.0003",
                "--no-verify",
            ]
        )
        == 0
    )
    bins = sorted(p.name for p in out.glob("*.bin"))
    assert len(bins) > 1 and not list(out.glob("*.safetensors")) and (out / "pytorch_model.bin.index.json").is_file()
    a = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    b = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        assert torch.equal(a(input_ids=ids).logits, b(input_ids=ids).logits)
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    (out / bins[0]).unlink()  # a missing shard fails verification with a message and exit code 1
    assert main(["verify", str(out)]) == 1
    assert f"missing shard file(s): {bins[0]}" in capsys.readouterr().out


def test_quantized_4bit_export_reloads_and_generates(tiny_qwen, adapter, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tunekit.export import export_model

    out = tmp_path / "q4"
    cfg = load_config(
        None,
        dict(
            model_name_or_path=str(tiny_qwen),
            adapter_name_or_path=str(adapter),
            template="qwen",
            export_dir=str(out),
            export_quantization_bit=4,
        ),
    )
    export_model(cfg)  # verify runs too
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["load_in_4bit"] is True
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model.model.layers[0].mlp.up_proj).__name__ == "Linear4bit"
    tok = AutoTokenizer.from_pretrained(out)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        new = model.generate(**ids, max_new_tokens=4, do_sample=False, min_new_tokens=4)[
            0, ids["input_ids"].shape[1] :
        ]
    assert new.numel() == 4


def test_export_errors_name_the_fix(tiny_qwen, tmp_path):
    from tunekit.export import export_model
    from tunekit.export.zero import consolidate_zero, zero_tag

    with pytest.raises(ConfigError, match="export_dir is not set"):
        export_model(load_config(None, dict(model_name_or_path=str(tiny_qwen), template="qwen")))
    with pytest.raises(ConfigError, match="is the model or adapter folder itself"):
        export_model(
            load_config(None, dict(model_name_or_path=str(tiny_qwen), template="qwen", export_dir=str(tiny_qwen)))
        )
    with pytest.raises(ConfigError, match="export_quantization_method: gptq needs calibration data"):
        export_model(
            load_config(
                None,
                dict(
                    model_name_or_path=str(tiny_qwen),
                    template="qwen",
                    export_dir=str(tmp_path / "g"),
                    export_quantization_bit=4,
                    export_quantization_method="gptq",
                ),
            )
        )
    assert zero_tag(tiny_qwen) is None
    with pytest.raises(ModelError, match="is not a DeepSpeed ZeRO checkpoint"):
        consolidate_zero(tiny_qwen, tmp_path / "z")
