"""`tunekit tiny-model --like glm4`: GLM-4-9B-0414's architecture in transformers' native Glm4ForCausalLM, GLM-4's
special tokens in their id order, and GLM-4's own chat template (the official one, not tunekit's export)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import CHAT_TEMPLATES
from tunekit.errors import ModelError
from tunekit.tiny.text import build_tiny_model, resolve_like

# GLM-4's added tokens as its tokenizer_config.json numbers them (151329 ... 151342), here from 0
GLM4_SPECIAL = [
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
]


@pytest.fixture(scope="module")
def glm4(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("glm4") / "model", like="glm4", seed=0)


def test_glm4_is_the_native_class_with_glm4_0414_structure(glm4):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(glm4, output_loading_info=True)
    assert type(model).__name__ == "Glm4ForCausalLM"
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
    cfg = json.loads((glm4 / "config.json").read_text())
    assert cfg["model_type"] == "glm4" and cfg["architectures"] == ["Glm4ForCausalLM"]
    assert (cfg["attention_bias"], cfg["tie_word_embeddings"], cfg["hidden_act"]) == (True, False, "silu")
    assert model.config.rope_parameters["partial_rotary_factor"] == 0.5  # rotary on half of each head
    layer = model.model.layers[0]
    linears = sorted(n for n, m in layer.named_modules() if type(m).__name__ == "Linear")
    assert linears == [
        "mlp.down_proj",
        "mlp.gate_up_proj",
        "self_attn.k_proj",
        "self_attn.o_proj",
        "self_attn.q_proj",
        "self_attn.v_proj",
    ]
    assert layer.mlp.gate_up_proj.out_features == 2 * cfg["intermediate_size"]  # gate and up fused, as GLM-4 has
    assert layer.self_attn.q_proj.bias is not None and layer.self_attn.o_proj.bias is None
    norms = sorted(n for n, m in layer.named_modules() if type(m).__name__ == "Glm4RMSNorm")
    assert norms == ["input_layernorm", "post_attention_layernorm", "post_mlp_layernorm", "post_self_attn_layernorm"]


def test_glm4_tokenizer_has_glm4_special_tokens_and_official_template(glm4):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(glm4)
    assert tok.convert_tokens_to_ids(GLM4_SPECIAL) == list(range(len(GLM4_SPECIAL)))
    for token in GLM4_SPECIAL:  # each one token, never split by the BPE
        assert tok(f"a{token}b", add_special_tokens=False)["input_ids"][1] == GLM4_SPECIAL.index(token)
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|endoftext|>", "<|endoftext|>", None)
    assert tok("Hi")["input_ids"] == tok("Hi", add_special_tokens=False)["input_ids"]  # nothing added by encode
    # the saved template is GLM-4's own chat template, byte for byte
    assert tok.chat_template == (CHAT_TEMPLATES / "glm4.jinja").read_text(encoding="utf-8")
    gen = json.loads((glm4 / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [0, 7, 9]  # <|endoftext|>, <|user|>, <|observation|> as GLM-4 stops
    cfg = json.loads((glm4 / "config.json").read_text())
    assert (cfg["eos_token_id"], cfg["pad_token_id"], cfg.get("bos_token_id")) == (0, 0, None)


def test_glm4_chat_template_renders_and_the_model_generates(glm4):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(glm4)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+3?"},
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "And 4+4?"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "[gMASK]<sop><|system|>\nBe brief.<|user|>\nWhat is 2+3?<|assistant|>\n5<|user|>\nAnd 4+4?<|assistant|>"
    )
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    assert prompt["input_ids"][0, :3].tolist() == [2, 4, 6]  # [gMASK] <sop> <|system|>
    model = AutoModelForCausalLM.from_pretrained(glm4)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > prompt["input_ids"].shape[1]


def test_glm_chat_hf_builds_glm_for_causal_lm(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = build_tiny_model(tmp_path / "glm", like="THUDM/glm-4-9b-chat-hf", seed=0)
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == "GlmForCausalLM" and not info["missing_keys"] and not info["unexpected_keys"]
    assert AutoTokenizer.from_pretrained(out).chat_template == (CHAT_TEMPLATES / "glm4.jinja").read_text("utf-8")


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("glm4", "glm4"),
        ("THUDM/GLM-4-9B-0414", "glm4"),
        ("zai-org/GLM-4-32B-0414", "glm4"),
        ("glm-4-9b", "glm4"),
        ("THUDM/glm-4-9b-chat-hf", "glm"),
        ("glm-4-9b-chat", "glm"),
        ("glm", "glm"),
    ],
)
def test_glm_names_map_to_their_native_architecture(name, family):
    resolved = resolve_like(name)
    assert resolved.config["model_type"] == family and resolved.tokenizer.name == "glm4"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        (
            "THUDM/chatglm3-6b",
            "ChatGLM's model (model_type chatglm) exists only as remote code, which tunekit does not run; glm4 "
            "builds GLM-4-9B-0414's native architecture",
        ),
        ("glm-4.5-air", "an unknown family"),
        ("glm-4v-9b", "an unknown family"),
        ("glm-4-9b-0414-moe", "a mixture-of-experts glm4 model ('moe'), which tunekit does not build"),
    ],
)
def test_glm_models_tunekit_cannot_build_are_refused_by_name(name, why, tmp_path):
    with pytest.raises(ModelError) as err:
        build_tiny_model(tmp_path / "out", like=name)
    assert str(err.value).startswith(f"tiny-model: tunekit cannot build '{name}' ({why}); it builds text: ")
    assert not (tmp_path / "out").exists()


def test_cli_builds_glm4(tmp_path, capsys):
    from tunekit.cli.verbs import run_verb

    code = run_verb("tunekit.cli.tiny_model_cmd", [str(tmp_path / "cli"), "--like", "glm4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "architecture  Glm4ForCausalLM (model_type glm4)" in out
    assert "tokenizer     PreTrainedTokenizerFast: bos None, eos <|endoftext|>, pad <|endoftext|>" in out


def test_a_glm4_config_json_is_shrunk_with_the_glm4_tokenizer(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tunekit.plan.builtin_shapes import find_builtin

    (tmp_path / "config.json").write_text(json.dumps(find_builtin("glm-4-9b-0414")))  # GLM-4-9B-0414's fields
    out = build_tiny_model(tmp_path / "tiny", like=tmp_path / "config.json", seed=0)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "Glm4ForCausalLM" and model.config.hidden_size == 64
    tok = AutoTokenizer.from_pretrained(out)
    assert (
        tok.convert_tokens_to_ids("[gMASK]") == 2 and tok.chat_template == (CHAT_TEMPLATES / "glm4.jinja").read_text()
    )
