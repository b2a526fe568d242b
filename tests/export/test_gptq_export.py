"""GPTQ export end to end on a tiny Qwen2 (hidden 128, so GPTQ's usual groups of 128 columns), on the CPU.

The isolated environment (llm-compressor 0.14.0.1, transformers 5.17.0, this torch) is built by the first test that
needs it, in ``~/.cache/tunekit-tests/envs`` (``$TUNEKIT_ENVS``; ``$XDG_CACHE_HOME`` is honoured): a folder under the
user's cache, not a test's tmp folder, so a machine pays the build once (about 3 minutes and 1.5 GB with the CPU torch
wheel at hand) and later runs reuse it (a quantization then takes about 20 s).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, alpaca_records, write_dataset
from tunekit.config import load_config
from tunekit.errors import ModelError
from tunekit.export import gptq_env
from tunekit.export.gptq_check import check_gptq_export, dequantized_weights, round_to_nearest
from tunekit.export.gptq_export import run_runner
from tunekit.export.quantize import calibration_texts

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
TEXTS = 12
MAXLEN = 64
EXAMPLE = ROOT / "examples" / "export-and-serve" / "qwen_gptq.yaml"


def _envs() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tunekit-tests" / "envs"


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """The tiny model, its calibration data and the environment variables every test here runs with."""
    from tunekit.tiny.text import build_tiny_model

    root = tmp_path_factory.mktemp("gptq")
    model = build_tiny_model(root / "tiny", like="qwen2", seed=0, hidden_size=128)
    data = root / "data"
    write_dataset(data, "calib", alpaca_records(TEXTS, seed=3))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(gptq_env.ENVS_VAR, str(_envs()))
        mp.delenv(gptq_env.PYTHON_VAR, raising=False)
        yield {"root": root, "model": model, "data": data}


def _cfg(setting, out: Path, bits: int = 4, **extra):
    return load_config(None, dict(_here(setting, out), export_quantization_bit=bits, **extra))


def _here(setting, out: Path) -> dict:
    """What cannot run here substituted in the example's own config: the model (the tiny one; the example's is the
    merged folder another example writes), export_dir, and the calibration data (these tests compare against RTN on
    exactly the texts GPTQ calibrated on)."""
    options = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert options["export_quantization_bit"] == 4 and options["template"] == "qwen"
    return dict(
        options,
        model_name_or_path=str(setting["model"]),
        dataset_dir=str(setting["data"]),
        export_dir=str(out),
        export_quantization_dataset="calib",
        export_quantization_maxlen=MAXLEN,
    )


def _texts(setting) -> list[str]:
    from transformers import AutoTokenizer

    from tunekit.data.pipeline import load_template

    cfg = _cfg(setting, setting["root"] / "unused")
    return calibration_texts(cfg, load_template(cfg, AutoTokenizer.from_pretrained(setting["model"])))


@pytest.mark.parametrize("bits", [4, 8])
def test_isolated_environment_quantizes_better_than_round_to_nearest(setting, bits):
    """Built once per machine, then reused; GPTQ's weights (read from the packed file, no compressed-tensors needed
    here) give logits closer to the unquantized model's than RTN on the same grid, on the calibration texts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    python = gptq_env.gptq_python()
    assert python == gptq_env.interpreter(gptq_env.env_dir(gptq_env.env_pins()))
    ready = json.loads((python.parents[1] / gptq_env.MARKER).read_text())
    assert ready["pins"] == gptq_env.env_pins()
    texts = _texts(setting)
    work = setting["root"] / f"work{bits}"
    request = dict(model=str(setting["model"]), out=str(work / "model"), bits=bits, group_size=128, texts=texts)
    result = run_runner(python, {**request, "max_length": MAXLEN, "max_shard_bytes": 10**9}, work)
    assert (result["llmcompressor"], result["transformers"]) == ("0.14.0.1", "5.17.0")
    assert (result["torch"], result["samples"], result["group_size"]) == (torch.__version__, TEXTS, 128)
    tok = AutoTokenizer.from_pretrained(setting["model"])
    assert result["tokens"] == sum(len(tok(t, add_special_tokens=False)["input_ids"][:MAXLEN]) for t in texts)
    quant = json.loads((work / "model" / "config.json").read_text())["quantization_config"]
    weights = quant["config_groups"]["group_0"]["weights"]
    assert (quant["quant_method"], quant["format"], quant["ignore"]) == (
        "compressed-tensors",
        "pack-quantized",
        ["lm_head"],
    )
    assert (weights["num_bits"], weights["group_size"], weights["symmetric"], weights["type"]) == (
        bits,
        128,
        True,
        "int",
    )

    reference, gptq, rtn = (AutoModelForCausalLM.from_pretrained(setting["model"], dtype=torch.float32) for _ in "abc")
    layers = 0
    with torch.no_grad():
        for name, weight in dequantized_weights(work / "model"):
            gptq.get_submodule(name).weight.copy_(weight)
            original = rtn.get_submodule(name).weight
            assert not torch.equal(weight, original)
            original.copy_(round_to_nearest(original, bits, 128))
            layers += 1
    assert layers == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers; the LM head stays unquantized
    errors = {"gptq": 0.0, "rtn": 0.0}
    with torch.inference_mode():
        for text in texts:
            ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids[:, :MAXLEN]
            z = reference(ids).logits[0].double()
            for key, model in (("gptq", gptq), ("rtn", rtn)):
                errors[key] += ((model(ids).logits[0].double() - z) ** 2).sum().item()
    assert 0 < errors["gptq"] < errors["rtn"]  # GPTQ's objective on exactly these texts; RTN is its no-update case


@pytest.fixture(scope="module")
def exported(setting):
    pytest.importorskip("compressed_tensors", reason="loading a GPTQ export needs tunekit[quant]'s compressed-tensors")
    from tunekit.export import export_model

    out = setting["root"] / "q4"
    export_model(_cfg(setting, out))  # the example's config; ends with the GPTQ check and tunekit verify
    return out


def test_gptq_export_reloads_with_plain_transformers_and_keeps_the_template(setting, exported):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tunekit.export.verify import verify_export

    provenance = json.loads((exported / "tunekit_export.json").read_text())
    assert provenance["quantization"]["method"] == "gptq" and provenance["quantization"]["bits"] == 4
    assert provenance["dtype"] is None and provenance["base"] == str(setting["model"].resolve())
    assert {"model.safetensors", "model.safetensors.index.json", "recipe.yaml", "chat_template.jinja"} <= {
        p.name for p in exported.iterdir()
    }
    model = AutoModelForCausalLM.from_pretrained(exported)
    tok = AutoTokenizer.from_pretrained(exported)
    messages = [{"role": "user", "content": "What is 2 plus 2?"}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == (  # tunekit's qwen template, default system prompt included, as training rendered it
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        new = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert new.shape[1] == ids["input_ids"].shape[1] + 4
    assert verify_export(exported)["ok"]


def test_gptq_check_passes_the_export_and_catches_wrong_scales(setting, exported, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    texts = _texts(setting)
    report = check_gptq_export(exported, setting["model"], texts, MAXLEN)
    assert report["stored_mismatch"] == 0.0 and report["layers"] == 14
    assert 0 < report["logit_error"] < report["rtn_error"]
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    for key in [k for k in tensors if k.endswith(".weight_scale")]:
        tensors[key] = tensors[key] * 2  # every weight twice what GPTQ wrote
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError) as err:
        check_gptq_export(broken, setting["model"], texts, MAXLEN)
    assert str(err.value).startswith(
        f"the GPTQ export in {broken} failed its check: the logits' relative RMS error on the calibration texts, "
    )
    assert "exceeds round-to-nearest's" in str(err.value)
