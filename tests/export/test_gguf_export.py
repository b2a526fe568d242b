"""export_format: gguf: llama.cpp's own converter and quantizer, the Ollama Modelfile, and verify in llama.cpp itself.

The converter comes from the llama-cpp-python sdist (export/gguf_source.py), extracted once per machine into
TUNEKIT_LLAMA_CPP_DIR (tests/conftest.py: the user's tunekit cache), or from the sdist that TUNEKIT_LLAMA_CPP_SDIST
names.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tests.go_template import go_render
from tests.helpers import ROOT
from tunekit.config import load_config
from tunekit.errors import ConfigError

QWEN_TEMPLATE = (
    "{{ if .System }}<|im_start|>system\n{{ $.System }}<|im_end|>\n{{ end }}"
    "{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
    '{{ if eq .Role "user" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n<|im_start|>assistant\n'
    '{{ else if eq .Role "assistant" }}{{ .Content }}<|im_end|>{{ if not $last }}\n{{ end }}{{ end }}{{ end }}'
)
TOOLS_NOTE = "# note: tools and tool results are not in this TEMPLATE (tunekit renders them with its tool format)\n"


@pytest.fixture(scope="module")
def adapter(tiny_qwen, tmp_path_factory) -> Path:
    """A PEFT LoRA with non-zero B on every linear layer, so the merged GGUF differs from the base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("gguf-adapter") / "lora"
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False),
    )
    peft_model.save_pretrained(out)
    return out


def _cfg(model: Path, out: Path, **extra):
    return load_config(
        None, dict(model_name_or_path=str(model), template="qwen", export_dir=str(out), export_format="gguf", **extra)
    )


@pytest.fixture(scope="module")
def f16_export(tiny_qwen, adapter, tmp_path_factory) -> Path:
    from tunekit.export import export_model

    out = tmp_path_factory.mktemp("gguf-f16") / "export"
    export_model(_cfg(tiny_qwen, out, adapter_name_or_path=str(adapter)), verify=False)
    return out


def _header(path: Path) -> dict:
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    return {
        "arch": reader.fields["general.architecture"].contents(),
        "pre": reader.fields["tokenizer.ggml.pre"].contents(),
        "types": sorted({t.tensor_type.name for t in reader.tensors}),
        "chat_template": reader.fields["tokenizer.chat_template"].contents(),
    }


def test_converter_hook_and_pre_tokenizer_choice(tiny_qwen):
    """The converter's private hook tunekit wraps still exists, and the tiny tokenizer's regex maps to 'qwen2'."""
    from tunekit.export.gguf_runner import HOOK, pre_tokenizer_from_json
    from tunekit.export.gguf_source import converter_dir, installed_version

    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split() if "==" in line)
    assert installed_version() == pins["llama-cpp-python"]  # the version whose converter the hook was read in
    module, cls, method = HOOK
    tree = ast.parse((converter_dir() / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    assert method in {f.name for f in classes[cls].body if isinstance(f, ast.FunctionDef)}
    assert pre_tokenizer_from_json(tiny_qwen) == "qwen2"


def test_f16_export_files_and_verify_in_llama_cpp(f16_export, capsys):
    from tunekit.cli import verify_cmd

    provenance = json.loads((f16_export / "tunekit_export.json").read_text())
    assert (provenance["format"], provenance["gguf_file"], provenance["gguf_type"]) == (
        "gguf",
        "model-f16.gguf",
        "f16",
    )
    assert sorted(p.name for p in f16_export.glob("*.gguf")) == ["model-f16.gguf"]
    assert not list(f16_export.glob("*.safetensors"))
    header = _header(f16_export / "model-f16.gguf")
    assert header["pre"] == "qwen2"  # chosen from tokenizer.json's regex: the tiny tokenizer's hash is unknown
    assert header["types"] == ["F16", "F32"]  # matrices f16, norms f32 (the converter's rule)
    assert "<|im_start|>" in header["chat_template"]
    assert verify_cmd.main([str(f16_export), "--strict"]) == 0
    printed = capsys.readouterr().out
    assert f"verify {f16_export}: OK" in printed
    assert "llama.cpp's ids == training's on a templated conversation" in printed
    assert "f16: max |llama.cpp - transformers| over the next-token logits = " in printed


def test_modelfile_text_qwen(f16_export):
    assert (f16_export / "Modelfile").read_text() == (
        "# Ollama Modelfile written by tunekit for the 'qwen' template\n"
        + TOOLS_NOTE
        + "\nFROM ./model-f16.gguf\n\n"
        + f'TEMPLATE """{QWEN_TEMPLATE}"""\n\n'
        + 'SYSTEM """You are Qwen, created by Alibaba Cloud. You are a helpful assistant."""\n\n'
        + 'PARAMETER stop "<|im_end|>"\n'
    )


def test_modelfile_text_llama3(tiny_llama):
    from tunekit.data.pipeline import load_template
    from tunekit.export.ollama import modelfile_text
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(None, dict(model_name_or_path=str(tiny_llama), template="llama3"))
    tokenizer = load_tokenizer(cfg)
    template = load_template(cfg, tokenizer)
    assert modelfile_text("model-q8_0.gguf", template, tokenizer, "Be brief.") == (
        "# Ollama Modelfile written by tunekit for the 'llama3' template\n"
        "# note: tunekit's 'llama3' template strips the assistant, observation, system, user contents; Ollama's "
        "template language cannot, so send them without leading/trailing whitespace\n"
        + TOOLS_NOTE
        + "\nFROM ./model-q8_0.gguf\n\n"
        'TEMPLATE """<|begin_of_text|>{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ $.System }}'
        "<|eot_id|>{{ end }}{{ range $i, $_ := .Messages }}"
        '{{ if eq .Role "user" }}<|start_header_id|>user<|end_header_id|>\n\n{{ .Content }}<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        '{{ else if eq .Role "assistant" }}{{ .Content }}<|eot_id|>{{ end }}{{ end }}"""\n\n'
        'SYSTEM """Be brief."""\n\n'
        'PARAMETER stop "<|eot_id|>"\n'
        'PARAMETER stop "<|eom_id|>"\n'
    )


def _peaked(tiny_qwen: Path, out: Path) -> Path:
    """The tiny Qwen2 with one confident prediction per step: the final norm reads channel 0 twenty times louder, and
    only tokens 100 / 200 have that channel (±3) in the tied head. The random tiny model's top-1 margins are all below
    twice the q8_0 bound; these are far above it, so the greedy comparison is judged."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.fill_(0.05)
        model.model.norm.weight[0] = 20.0
        embeddings = model.get_input_embeddings().weight
        embeddings[:, 0] = 0.0
        embeddings[100, 0], embeddings[200, 0] = 3.0, -3.0
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_qwen).save_pretrained(out)
    return out


def test_q8_0_export_is_quantized_by_llama_cpp_and_verified(tiny_qwen, tmp_path, capsys):
    import re

    from tunekit.export import export_model

    out = tmp_path / "export"
    export_model(_cfg(_peaked(tiny_qwen, tmp_path / "peaked"), out, export_gguf_type="q8_0"))
    printed = capsys.readouterr().out
    assert "quantizing to q8_0 with llama.cpp" in printed and f"verify {out}: OK" in printed
    found = re.search(r"top-1 equals transformers' at (\d+)/16 steps, (\d+) of them judged", printed)
    assert found and int(found[2]) >= 8, printed  # most steps judged, and every judged one agreed (else FAILED)
    assert "Q8_0" in _header(out / "model-q8_0.gguf")["types"]
    assert "FROM ./model-q8_0.gguf\n" in (out / "Modelfile").read_text()


@pytest.mark.parametrize(
    ("like", "template", "arch"), [("llama", "llama3", "llama"), ("glm4", "glm4", "glm4"), ("qwen3", "qwen3", "qwen3")]
)
def test_other_families_convert_and_verify_in_llama_cpp(like, template, arch, tmp_path, capsys):
    """Llama 3, GLM-4 (Glm4ForCausalLM) and Qwen3 (its template drops earlier replies' thoughts from the prompt)."""
    from tunekit.export import export_model
    from tunekit.tiny.text import build_tiny_model

    model = build_tiny_model(tmp_path / "model", like=like, seed=0)
    out = tmp_path / "export"
    cfg = dict(model_name_or_path=str(model), template=template, export_dir=str(out), export_format="gguf")
    export_model(load_config(None, cfg))  # verified at the end: raises on any problem
    assert f"verify {out}: OK" in capsys.readouterr().out
    header = _header(out / "model-f16.gguf")
    assert (header["arch"], header["types"]) == (arch, ["F16", "F32"])


def test_verify_fails_on_corrupted_weights(f16_export, tmp_path, capsys):
    import shutil

    from tunekit.cli import verify_cmd

    broken = tmp_path / "broken"
    shutil.copytree(f16_export, broken)
    data = bytearray((broken / "model-f16.gguf").read_bytes())
    data[-4096:] = b"\x00\x3c" * 2048  # the last tensor's data (f16 1.0 everywhere): the file still loads
    (broken / "model-f16.gguf").write_bytes(bytes(data))
    assert verify_cmd.main([str(broken)]) == 1
    printed = capsys.readouterr().out
    assert f"verify {broken}: FAILED" in printed
    assert "problem: f16: max |llama.cpp - transformers| over the next-token logits = " in printed
    assert ": above the bound" in printed


def test_verify_fails_when_the_embedded_template_is_not_the_recorded_one(f16_export, tmp_path, capsys):
    """The GGUF carries the qwen template (with its default system message); a record saying the model was trained
    with another ChatML template renders other text: llama.cpp's rendering no longer equals training's."""
    import shutil

    from tunekit.cli import verify_cmd

    wrong = tmp_path / "wrong"
    shutil.copytree(f16_export, wrong)
    provenance = json.loads((wrong / "tunekit_export.json").read_text())
    (wrong / "tunekit_export.json").write_text(json.dumps({**provenance, "template": "qwen3_nothink"}))
    assert verify_cmd.main([str(wrong)]) == 1
    printed = capsys.readouterr().out
    assert (
        "problem: the GGUF's chat template (tokenizer.chat_template, what llama.cpp runtimes render with)" in printed
    )


def test_refusals_before_anything_is_written(tiny_qwen, tmp_path):
    from peft import PrefixTuningConfig, TaskType, get_peft_model
    from transformers import AutoModelForCausalLM

    from tunekit.export import export_model

    out = tmp_path / "export"
    prefix = tmp_path / "prefix"
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen)
    get_peft_model(model, PrefixTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=4)).save_pretrained(
        prefix
    )
    with pytest.raises(ConfigError) as err:
        export_model(_cfg(tiny_qwen, out, adapter_name_or_path=str(prefix)))
    assert str(err.value) == (
        f"export_format: gguf needs weights to convert, but {prefix} is a prefix / prompt adapter (finetuning_type "
        "ptuning or prompt), which changes no weight and cannot be merged into the model: export it with "
        "export_format: safetensors (the adapter with a reference to its base)."
    )
    for name, change in (("vlm", {"vision_config": {"model_type": "siglip_vision_model"}}), ("other", None)):
        folder = tmp_path / name
        folder.mkdir()
        config = json.loads((tiny_qwen / "config.json").read_text())
        config.update(change or {"architectures": ["Qwen2ForTokenRegression"]})
        (folder / "config.json").write_text(json.dumps(config))
        with pytest.raises(ConfigError) as err:
            export_model(_cfg(folder, out))
        assert str(err.value) == (
            f"export_format: gguf converts text models; {folder} is a vision-language or audio model "
            "(Qwen2ForCausalLM), whose tower llama.cpp keeps in a separate mmproj file that tunekit does not write: "
            "export it with export_format: safetensors."
            if name == "vlm"
            else "export_format: gguf: llama.cpp's converter (llama-cpp-python 0.3.36) has no architecture "
            f"Qwen2ForTokenRegression ({folder}), so it cannot write a GGUF of this model: export it with "
            "export_format: safetensors."
        )
    assert not out.exists()


def test_schema_refuses_safetensors_options_on_a_gguf_export(tiny_qwen, tmp_path):
    with pytest.raises(ConfigError) as err:
        _cfg(tiny_qwen, tmp_path / "x", export_quantization_bit=4)
    assert (
        "export_quantization_bit applies to a safetensors export; a GGUF export is one file quantized by llama.cpp: "
        "remove export_quantization_bit and set export_gguf_type (f32, f16, bf16, q8_0, q4_k_m) instead."
    ) in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(None, dict(model_name_or_path=str(tiny_qwen), export_gguf_type="q4_k_m"))
    assert "export_gguf_type (q4_k_m) applies to a GGUF export: set export_format: gguf, or remove " in str(err.value)


def test_only_the_converter_files_are_taken_from_the_sdist(tmp_path, monkeypatch):
    import io
    import tarfile

    from tunekit.errors import EnvironmentProblem
    from tunekit.export import gguf_source
    from tunekit.export.gguf_export import supported_architectures

    name = f"llama_cpp_python-{gguf_source.installed_version()}"
    archive = tmp_path / f"{name}.tar.gz"
    vendor = f"{name}/vendor/llama.cpp"
    members = {
        f"{vendor}/convert_hf_to_gguf.py": "# converter",
        f"{vendor}/conversion/__init__.py": "TEXT_MODEL_MAP: dict[str, str] = {'Qwen2ForCausalLM': 'qwen'}",
        f"{vendor}/gguf-py/gguf/__init__.py": "",
        f"{vendor}/ggml/src/ggml.c": "int x;",
        f"{vendor}/conversion/../../../../escape.py": "outside",  # a crafted name: never written outside the folder
    }
    with tarfile.open(archive, "w:gz") as tar:
        for member, text in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    monkeypatch.setenv("TUNEKIT_LLAMA_CPP_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNEKIT_LLAMA_CPP_SDIST", str(archive))
    folder = gguf_source.converter_dir()
    assert folder == tmp_path / "cache" / name
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "conversion/__init__.py",
        "convert_hf_to_gguf.py",
        "gguf-py/gguf/__init__.py",
    ]
    assert not list(tmp_path.rglob("escape.py"))
    assert supported_architectures(folder) == {"Qwen2ForCausalLM"}

    other = tmp_path / "llama_cpp_python-0.0.1.tar.gz"
    archive.rename(other)
    monkeypatch.setenv("TUNEKIT_LLAMA_CPP_DIR", str(tmp_path / "cache2"))
    monkeypatch.setenv("TUNEKIT_LLAMA_CPP_SDIST", str(other))
    with pytest.raises(EnvironmentProblem) as err:
        gguf_source.converter_dir()
    assert (
        str(err.value) == f"TUNEKIT_LLAMA_CPP_SDIST={other} is not {name}.tar.gz, the sdist of the installed version."
    )


@pytest.mark.parametrize("name", ["qwen", "llama3", "glm4", "gemma", "mistral", "qwen3_nothink"])
def test_modelfile_template_renders_what_tunekit_renders(name, tiny_qwen):
    """The TEMPLATE, rendered with Go's template semantics, gives tunekit's generation prompt (without and with a
    system message; contents without surrounding spaces, which Ollama cannot trim)."""
    from tunekit.data.templates import get_template
    from tunekit.export.ollama import go_template

    template = get_template(name)
    go = go_template(template)
    conversation = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ]
    for system in (None, "Be terse."):
        messages = ([{"role": "system", "content": system}] if system else []) + conversation
        rendered = go_render(go, system or template.default_system or "", messages)
        assert rendered == template.render_prompt(conversation, system), (name, system)
