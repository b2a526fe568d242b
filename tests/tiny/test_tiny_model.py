"""tunekit.tiny: tiny models that plain transformers reloads with the same ids and no missing keys."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunekit.errors import ModelError
from tunekit.tiny.text import build_tiny_model, resolve_like
from tunekit.tiny.tokenizer import TOKENIZERS, build_tokenizer, chat_template_for

MIXED = [
    "Hello, world! The year 2024 had 366 days.",
    "今天早上天气很好，我们一起去公园散步。价格是 3.5 元。",
    "12345+67890=80235",
    "mixed 中文 and English: 第1步, step 2; x**2 == 49\n\n\tdef f(): return 'ok'",
    "  leading spaces,   runs   of spaces, café naïve ÄÖÜ emoji 🙂 done.",
]

# family -> (model class, tokenizer family, bos, eos, pad, turn markers the chat template must produce)
FAMILIES = {
    "qwen2": ("Qwen2ForCausalLM", "qwen", None, "<|im_end|>", "<|endoftext|>", ["<|im_start|>", "<|im_end|>"]),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", None, "<|im_end|>", "<|endoftext|>", ["<|im_start|>", "<|im_end|>"]),
    "llama": (
        "LlamaForCausalLM",
        "llama3",
        "<|begin_of_text|>",
        "<|eot_id|>",
        None,
        ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    ),
    "mistral": ("MistralForCausalLM", "mistral", "<s>", "</s>", None, ["[INST]", "[/INST]"]),
    "gemma": ("GemmaForCausalLM", "gemma", "<bos>", "<eos>", "<pad>", ["<start_of_turn>", "<end_of_turn>"]),
}


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {fam: build_tiny_model(root / fam, like=fam, seed=0) for fam in FAMILIES}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_reloaded_tokenizer_gives_the_trained_ids(built, family):
    from transformers import AutoTokenizer

    cls, tok_family, bos, eos, pad, markers = FAMILIES[family]
    spec = TOKENIZERS[tok_family]
    trained = build_tokenizer(spec, 2048, chat_template_for(spec.template), 2048)
    reloaded = AutoTokenizer.from_pretrained(built[family])
    for text in MIXED:
        want = trained(text)["input_ids"]
        assert reloaded(text)["input_ids"] == want, (family, text)
        assert reloaded.decode(want, skip_special_tokens=True) == text
    # digits are one token each
    ids = reloaded("9876543210", add_special_tokens=False)["input_ids"]
    assert reloaded.convert_ids_to_tokens(ids) == list("9876543210")
    # bos / eos / pad as the real family sets them; BOS added only where the family adds it
    assert (reloaded.bos_token, reloaded.eos_token, reloaded.pad_token) == (bos, eos, pad)
    first = reloaded("hi")["input_ids"][0]
    assert (first == reloaded.bos_token_id) == (bos is not None)
    # every special token is a single id and survives a round trip
    for tok in (*spec.special, *spec.extra):
        assert reloaded(tok, add_special_tokens=False)["input_ids"] == [reloaded.convert_tokens_to_ids(tok)]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_model_reloads_without_missing_keys_and_generates(built, family):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cls, _, _, eos, _, markers = FAMILIES[family]
    model, info = AutoModelForCausalLM.from_pretrained(built[family], output_loading_info=True)
    assert type(model).__name__ == cls
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
    cfg = json.loads((built[family] / "config.json").read_text())
    assert cfg["architectures"] == [cls]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (
        64,
        2,
        4,
        2,
    )
    tok = AutoTokenizer.from_pretrained(built[family])
    assert cfg["vocab_size"] >= len(tok) and cfg["vocab_size"] % 64 == 0
    assert cfg["eos_token_id"] == tok.eos_token_id
    gen = json.loads((built[family] / "generation_config.json").read_text())
    assert tok.eos_token_id in gen["eos_token_id"]

    messages = [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "5"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    for marker in markers:
        assert marker in text
    prompt = tok.apply_chat_template(messages[:1], add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **prompt, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id or tok.eos_token_id
        )
    assert out.shape[1] > prompt["input_ids"].shape[1]


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, built):
    again = build_tiny_model(tmp_path / "again", like="qwen2", seed=0)
    assert _digest(again) == _digest(built["qwen2"])
    other = build_tiny_model(tmp_path / "other", like="qwen2", seed=1)
    assert (other / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()


def test_cli_in_a_fresh_process_with_more_threads_writes_the_same_files(tmp_path, built):
    env = dict(os.environ, RAYON_NUM_THREADS="4", TOKENIZERS_PARALLELISM="true")
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "tiny-model", str(out), "--like", "qwen2", "--seed", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Qwen2ForCausalLM" in proc.stdout and "<|im_end|>" in proc.stdout
    assert _digest(out) == _digest(built["qwen2"])


def test_cli_help_does_not_import_torch():
    code = (
        "import sys\nfrom tunekit.cli.main import main\ntry:\n    main(['tiny-model', '--help'])\n"
        "except SystemExit:\n    pass\nprint('TORCH' if 'torch' in sys.modules else 'NOTORCH')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--like" in proc.stdout and proc.stdout.strip().endswith("NOTORCH")


@pytest.mark.parametrize(
    ("name", "model_type"),
    [
        ("qwen2.5-7b", "qwen2"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2"),
        ("qwen3-8b", "qwen3"),
        ("llama-3.1-8b", "llama"),
        ("meta-llama/Llama-3.2-1B", "llama"),
        ("mistral-7b-v0.3", "mistral"),
        ("gemma-2-2b", "gemma2"),
        ("google/gemma-3-1b-it", "gemma3_text"),
        ("gemma", "gemma"),
    ],
)
def test_model_names_map_to_families(name, model_type):
    assert resolve_like(name).config["model_type"] == model_type


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ModelError, match=r"cannot build 'gpt-neo' \(an unknown family\).*qwen2.*config\.json"):
        resolve_like("gpt-neo")
    with pytest.raises(ModelError, match="divisible by num_heads"):
        build_tiny_model("/nonexistent/never-written", like="qwen2", hidden_size=66, num_heads=4)


def test_like_config_path_keeps_structure_and_shrinks_sizes(tmp_path):
    from transformers import AutoModelForCausalLM

    real = {  # the shape of a Qwen2.5-7B config.json (structure flags that must survive)
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 131072,
        "torch_dtype": "bfloat16",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "max_window_layers": 28,
    }
    folder = tmp_path / "real"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(real))
    out = build_tiny_model(tmp_path / "tiny", like=folder, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=1)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert cfg["tie_word_embeddings"] is False and cfg["use_sliding_window"] is False
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["intermediate_size"]) == (
        32,
        2,
        1,
        128,
    )
    assert cfg["rope_parameters"]["rope_theta"] == 1000000.0
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()  # untied, as in 7B


def test_like_moe_config_shrinks_experts(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    (tmp_path / "config.json").write_text(json.dumps(AutoConfig.for_model("mixtral").to_dict()))
    out = build_tiny_model(tmp_path / "tiny", like=tmp_path / "config.json")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["MixtralForCausalLM"] and cfg["num_local_experts"] == 4
    _, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "</s>"


def test_like_config_errors(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        resolve_like(tmp_path / "missing" / "config.json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "custom", "auto_map": {"AutoModel": "x.Y"}}))
    with pytest.raises(ModelError, match="remote code"):
        resolve_like(tmp_path)


def test_explicit_vocab_size(tmp_path):
    from transformers import AutoTokenizer

    out = build_tiny_model(tmp_path / "v", like="llama", vocab_size=600)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 600
    assert len(AutoTokenizer.from_pretrained(out)) == 600
    with pytest.raises(ModelError, match="too small"):
        build_tiny_model(tmp_path / "w", like="llama", vocab_size=100)


def test_like_llama31_config_keeps_rope_scaling_consistent(tmp_path, caplog):
    from transformers import AutoModelForCausalLM

    real = {  # the shape of a Llama-3.1-8B config.json (transformers 4 style rope_scaling)
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "mlp_bias": False,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    }
    (tmp_path / "config.json").write_text(json.dumps(real))
    out = build_tiny_model(tmp_path / "tiny", like=tmp_path / "config.json")
    rope = json.loads((out / "config.json").read_text())["rope_parameters"]
    assert rope["rope_type"] == "llama3" and rope["rope_theta"] == 500000.0 and rope["factor"] == 8.0
    assert rope["original_max_position_embeddings"] == 2048 // 8  # below the shrunk max_position_embeddings
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM" and model.lm_head.weight.shape[0] >= 1800


# --- a stand-in is never silent --------------------------------------------------------------------------------------


def _tiny_cli(argv: list[str], capsys) -> tuple[int, str]:
    from tunekit.cli.verbs import run_verb

    code = run_verb("tunekit.cli.tiny_model_cmd", argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("qwen3-vl-30b-a3b", "qwen3-vl-30b-a3b is a vision-language model and a mixture-of-experts model"),
        ("qwen3.5-4b", "an unknown family"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl-7b-instruct is a vision-language model"),
        (
            "qwen3-next-80b-a3b",
            "qwen3-next-80b-a3b is a hybrid-attention model (Qwen3-Next) and a mixture-of-experts model",
        ),
        ("gemma3n-e4b", "'n-e4b' is not a gemma3_text variant tunekit knows"),
        ("gemma-2-27b-a4b", "a mixture-of-experts gemma2 model ('a4b'), which tunekit does not build"),
    ],
)
def test_a_model_tunekit_cannot_build_is_refused_by_name_and_nothing_is_written(name, what, tmp_path, capsys):
    """These used to write a dense text-only Qwen3 / Qwen2 / Gemma 3 without a word."""
    builds = (
        "it builds text: deepseek_v2, deepseek_v3, gemma, gemma2, gemma3_text, glm, glm4, gpt_oss, llama, mistral, "
        "mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe (and names such as qwen2.5-7b, llama-3.1-8b, qwen3-30b-a3b); "
        "vision-language / audio: gemma-3-vl, gemma3, idefics3, llava, llava-1.5, llava-1.6, llava-next, "
        "llava-next-llama3, llava-next-mistral, llava1.5, "
        "qwen2-audio, qwen2-vl, qwen2.5-vl, qwen3-vl, smolvlm, smolvlm1, smolvlm2; or a path to a config.json / model "
        "folder."
    )
    with pytest.raises(ModelError) as err:
        build_tiny_model(tmp_path / "lib", like=name)
    assert str(err.value) == f"tiny-model: tunekit cannot build '{name}' ({what}); {builds}"
    code, stderr = _tiny_cli([str(tmp_path / "cli"), "--like", name], capsys)
    assert code != 0 and stderr == f"error: {err.value}\n"
    assert not (tmp_path / "lib").exists() and not (tmp_path / "cli").exists()


def test_a_mixture_of_experts_name_builds_the_real_moe_architecture(tmp_path):
    from transformers import AutoModelForCausalLM

    for name, arch, tokenizer in (
        ("qwen3-30b-a3b", "Qwen3MoeForCausalLM", "qwen3"),
        ("qwen2-57b-a14b", "Qwen2MoeForCausalLM", "qwen"),
    ):
        assert resolve_like(name).tokenizer.name == tokenizer
        out = build_tiny_model(tmp_path / name, like=name, seed=0)
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
        assert type(model).__name__ == arch and not info["missing_keys"] and not info["unexpected_keys"]
        assert (model.config.num_experts, model.config.num_experts_per_tok) == (4, 2)  # shrunk like --like mixtral


def test_an_existing_folder_is_replaced_only_with_overwrite(tmp_path, capsys, built):
    import shutil

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, stderr = _tiny_cli([str(folder), "--like", "qwen2"], capsys)
    assert code != 0 and stderr == (
        f"error: tiny-model: {folder} exists and is not empty (1 entries, e.g. notes.txt): "
        f"choose a new or empty folder, or pass --overwrite to replace the model in it.\n"
    )
    code, stderr = _tiny_cli([str(folder), "--like", "qwen2", "--overwrite"], capsys)
    assert code != 0 and "--overwrite replaces a model folder (one with config.json)" in stderr
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]  # nothing written, nothing lost
    shutil.rmtree(folder)
    shutil.copytree(built["llama"], folder)
    (folder / "preprocessor_config.json").write_text("{}")  # a file of another model must not stay next to the new one
    assert _tiny_cli([str(folder), "--like", "qwen2", "--overwrite"], capsys)[0] == 0
    assert _digest(folder) == _digest(built["qwen2"])
    code, stderr = _tiny_cli([str(folder), "--like", "qwen2"], capsys)
    assert code != 0 and "exists and is not empty" in stderr and _digest(folder) == _digest(built["qwen2"])
