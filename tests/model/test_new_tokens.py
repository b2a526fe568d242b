"""The special tokens a config adds and their embedding rows (model/new_tokens.py): LLaMA-Factory's
new_special_tokens_config and init_special_tokens, on a tiny Qwen2 whose embedding is padded beyond its tokenizer
(1829 tokens, 1856 rows), so the new tokens land in padding rows without a resize."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.helpers import LLAMAFACTORY_INPUTS
from tunekit.config import load_config
from tunekit.config.special_tokens import read_special_tokens
from tunekit.errors import ConfigError, ModelError
from tunekit.model.loader import load_model, load_tokenizer
from tunekit.model.new_tokens import add_new_tokens, init_new_rows

LF_TOKENS = LLAMAFACTORY_INPUTS / "multi_tokens_tokens_cfg.yaml"  # examples/extras/multi_tokens/tokens_cfg.yaml


def _cfg(model, **kw):
    return load_config(None, {"model_name_or_path": str(model), "template": "qwen", "finetuning_type": "full", **kw})


def _load(model, **kw):
    cfg = _cfg(model, **kw)
    tokenizer = load_tokenizer(cfg)
    return load_model(cfg, tokenizer), tokenizer


def _original_embedding(model_dir) -> torch.Tensor:
    return AutoModelForCausalLM.from_pretrained(model_dir).get_input_embeddings().weight.detach().clone()


def _ids(tokenizer, tokens) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def test_the_llamafactory_example_file_is_read_unchanged():
    tokens = read_special_tokens(LF_TOKENS)
    assert len(tokens) == 16
    assert list(tokens)[:2] == ["<|START_OF_SVG|>", "<|END_OF_SVG|>"]
    assert tokens["<|start_of_style|>"] == "Begins a style definition block for CSS styling"


def test_desc_init_rows_are_exactly_the_mean_of_the_description_tokens_rows(tiny_qwen):
    original = _original_embedding(tiny_qwen)
    assert original.shape[0] == 1856
    model, tokenizer = _load(tiny_qwen, new_special_tokens_config=str(LF_TOKENS), init_special_tokens="desc_init")
    weight = model.get_input_embeddings().weight.detach()
    assert weight.shape[0] == 1856  # no resize: the 16 tokens fit the padding rows
    descriptions = read_special_tokens(LF_TOKENS)
    ids = _ids(tokenizer, descriptions)
    assert ids == list(range(len(tokenizer) - 16, len(tokenizer))) and max(ids) < 1856
    for token, row in zip(descriptions, ids):
        sources = tokenizer(descriptions[token], add_special_tokens=False)["input_ids"]
        assert sources and max(sources) < len(tokenizer) - 16  # plain words, none of them new
        assert torch.equal(weight[row], original[sources].mean(dim=0)), token
    assert torch.equal(weight[: len(tokenizer) - 16], original[: len(tokenizer) - 16])  # the vocabulary unchanged


def test_noise_init_is_the_vocabulary_mean_plus_noise_of_std_one_over_sqrt_hidden(tiny_qwen):
    """The padding rows stay out of the mean; the noise is torch's generator's (compared draw for draw) and its std,
    over 16 x 64 samples, is 1/sqrt(64) within 4 standard errors (a sample std's is about std / sqrt(2n))."""
    original = _original_embedding(tiny_qwen)
    model, tokenizer = _load(tiny_qwen, new_special_tokens_config=str(LF_TOKENS))
    vocabulary = len(tokenizer) - 16
    mean = original[:vocabulary].mean(dim=0)
    ids = _ids(tokenizer, read_special_tokens(LF_TOKENS))
    weight = model.get_input_embeddings().weight.detach()
    noise = weight[ids] - mean
    std, n = 1 / math.sqrt(64), noise.numel()
    assert abs(noise.std().item() - std) < 4 * std / math.sqrt(2 * n)
    assert abs(noise.mean().item()) < 4 * std / math.sqrt(n)

    torch.manual_seed(7)
    assert init_new_rows(model, tokenizer, "noise_init") == ids
    torch.manual_seed(7)
    expected = mean + torch.randn(16, 64) / math.sqrt(64)
    assert torch.equal(model.get_input_embeddings().weight.detach()[ids], expected)


def test_desc_init_w_noise_adds_the_same_noise_to_the_description_mean(tiny_qwen):
    model, tokenizer = _load(tiny_qwen, new_special_tokens_config=str(LF_TOKENS), init_special_tokens="desc_init")
    descriptions = read_special_tokens(LF_TOKENS)
    ids = _ids(tokenizer, descriptions)
    plain = model.get_input_embeddings().weight.detach()[ids].clone()
    torch.manual_seed(3)
    init_new_rows(model, tokenizer, "desc_init_w_noise")
    torch.manual_seed(3)
    assert torch.equal(model.get_input_embeddings().weight.detach()[ids], plain + torch.randn(16, 64) / 8)


def test_a_token_added_into_the_padding_rows_is_initialised_and_a_known_one_is_left_alone(tiny_qwen):
    """Before model/new_tokens.py the row kept what the padding row held (no resize, so nothing set it)."""
    original = _original_embedding(tiny_qwen)
    model, tokenizer = _load(tiny_qwen, add_special_tokens="<|tool_a|>,<|im_start|>")
    new, known = _ids(tokenizer, ["<|tool_a|>", "<|im_start|>"])
    assert new == len(tokenizer) - 1 < 1856 and known < new
    weight = model.get_input_embeddings().weight.detach()
    assert not torch.equal(weight[new], original[new])
    mean = original[: len(tokenizer) - 1].mean(dim=0)
    assert (weight[new] - mean).abs().max() < 6 / math.sqrt(64)
    assert torch.equal(weight[known], original[known])


def test_an_untied_output_embedding_starts_from_its_own_rows(tiny_qwen):
    """LLaMA-Factory starts an untied lm_head's desc_init rows from the input embedding's rows; tunekit from the
    lm_head's own rows of the description's tokens (and noise_init from its own mean)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_qwen)
    config.tie_word_embeddings = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings().weight.detach().clone()
    inputs = model.get_input_embeddings().weight.detach().clone()
    cfg = _cfg(tiny_qwen, new_special_tokens_config=str(LF_TOKENS), init_special_tokens="desc_init")
    tokenizer = load_tokenizer(cfg)
    ids = init_new_rows(model, tokenizer, "desc_init")
    descriptions = read_special_tokens(LF_TOKENS)
    for token, row in zip(descriptions, ids):
        sources = tokenizer(descriptions[token], add_special_tokens=False)["input_ids"]
        assert torch.equal(model.get_output_embeddings().weight.detach()[row], head[sources].mean(dim=0))
        assert torch.equal(model.get_input_embeddings().weight.detach()[row], inputs[sources].mean(dim=0))
    torch.manual_seed(5)
    init_new_rows(model, tokenizer, "noise_init")
    vocabulary = len(tokenizer) - 16
    torch.manual_seed(5)
    first, second = torch.randn(16, 64) / 8, torch.randn(16, 64) / 8  # the input rows' noise is drawn first
    assert torch.equal(model.get_input_embeddings().weight.detach()[ids], inputs[:vocabulary].mean(dim=0) + first)
    assert torch.equal(model.get_output_embeddings().weight.detach()[ids], head[:vocabulary].mean(dim=0) + second)


def test_a_description_of_new_tokens_only_falls_back_to_the_vocabulary_mean(tiny_qwen, tmp_path):
    (tmp_path / "t.yaml").write_text('"<|a|>": "<|b|>"\n"<|b|>": ""\n', encoding="utf-8")
    original = _original_embedding(tiny_qwen)
    model, tokenizer = _load(
        tiny_qwen, new_special_tokens_config=str(tmp_path / "t.yaml"), init_special_tokens="desc_init"
    )
    mean = original[: len(tokenizer) - 2].mean(dim=0)
    weight = model.get_input_embeddings().weight.detach()
    assert torch.equal(weight[_ids(tokenizer, ["<|a|>"])[0]], mean)
    assert torch.equal(weight[_ids(tokenizer, ["<|b|>"])[0]], mean)


def test_a_tokenizer_without_new_tokens_changes_no_row(tiny_qwen):
    cfg = _cfg(tiny_qwen)
    tokenizer = load_tokenizer(cfg)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen)
    before = model.get_input_embeddings().weight.detach().clone()
    add_new_tokens(cfg, tokenizer)
    assert init_new_rows(model, tokenizer, "noise_init") == []
    assert torch.equal(model.get_input_embeddings().weight.detach(), before)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            dict(new_special_tokens_config="t.yaml", add_special_tokens="<a>"),
            "new_special_tokens_config and add_special_tokens both name special tokens to add: keep one (list every "
            "token in the YAML file, or remove new_special_tokens_config).",
        ),
        (
            dict(init_special_tokens="desc_init_w_noise", add_special_tokens="<a>"),
            "init_special_tokens: desc_init_w_noise starts each new token from its description, which only "
            "new_special_tokens_config gives: set new_special_tokens_config to a YAML file of `token: description` "
            "lines, or use init_special_tokens: noise_init.",
        ),
    ],
)
def test_what_llamafactory_substitutes_with_a_warning_is_refused(values, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, {"model_name_or_path": "m", **values})
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "- <a>\n- <b>\n",
            "{path} must hold `token: description` lines (a mapping), found list: write one line per new token, e.g. "
            '`"<|start_of_svg|>": "Marks the beginning of an SVG"`.',
        ),
        (
            "# nothing yet\n",
            "{path} must hold `token: description` lines (a mapping), found nothing (the file is empty): write one "
            'line per new token, e.g. `"<|start_of_svg|>": "Marks the beginning of an SVG"`.',
        ),
        (
            '"<a>": 3\n',
            "{path}: the description of '<a>' is int, not text: quote it (`'<a>': \"...\"`) or write a sentence.",
        ),
        (
            '"<a>": x\n"": y\n',
            "{path} names an empty or non-text token (''): every key must be the token's text (quote it); remove "
            "that line or write the token.",
        ),
        ('"<a>": x\n"<a>": y\n', "{path}: key '<a>' is given twice (lines 1 and 2); keep one of them."),
        ('"<a>": [x\n', "{path} is not valid YAML: line 2, column 1: did not find expected ',' or ']'"),
    ],
)
def test_a_broken_tokens_file_is_refused_naming_the_file_and_the_fix(text, message, tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_special_tokens(path)
    prefix = "" if "given twice" in message else "new_special_tokens_config "  # config/files.py's own
    assert str(err.value) == prefix + message.format(path=path)


def test_a_missing_tokens_file_is_refused_when_the_tokenizer_loads(tiny_qwen, tmp_path):
    cfg = _cfg(tiny_qwen, new_special_tokens_config=str(tmp_path / "none.yaml"))
    with pytest.raises(ConfigError) as err:
        load_tokenizer(cfg)
    assert str(err.value) == (
        f"new_special_tokens_config {tmp_path / 'none.yaml'} does not exist (or is not a file): give the YAML file of "
        "`token: description` lines."
    )


def test_the_tokens_file_can_sit_in_a_copied_folder(tiny_qwen, tmp_path):
    """The YAML's tokens are added in its order, after the tokenizer's own (LLaMA-Factory's add order)."""
    shutil.copy(LF_TOKENS, tmp_path / "tokens_cfg.yaml")
    tokenizer = load_tokenizer(_cfg(tiny_qwen, new_special_tokens_config=str(tmp_path / "tokens_cfg.yaml")))
    assert tokenizer.convert_ids_to_tokens(list(range(len(tokenizer) - 16, len(tokenizer)))) == list(
        read_special_tokens(LF_TOKENS)
    )


def test_a_resumed_run_must_add_the_same_tokens_the_same_way():
    """The tokens and their rows change what trains: a checkpoint's run and the run resuming it must agree."""
    from tunekit.train.resume import _not_training

    assert not {"add_special_tokens", "new_special_tokens_config", "init_special_tokens"} & _not_training()


def test_new_tokens_whose_rows_would_never_train_are_refused(tiny_qwen):
    """LoRA adapts no embedding: the new rows would stay as initialised. Refused naming what trains them; with the
    embeddings in additional_target (what LLaMA-Factory adds by itself) the input rows train."""
    with pytest.raises(ModelError) as err:
        _load(tiny_qwen, finetuning_type="lora", add_special_tokens="<|a|>,<|b|>")
    assert str(err.value) == (
        "2 new special token(s) get embedding rows that finetuning_type lora never trains, so they would stay as "
        "initialised: train the input and output embeddings too (additional_target: embed_tokens,lm_head with lora "
        "or oft, freeze_extra_modules with freeze: your model's module names; LLaMA-Factory adds them by itself), or "
        "use finetuning_type full."
    )
    model, _ = _load(
        tiny_qwen, finetuning_type="lora", add_special_tokens="<|a|>,<|b|>", additional_target="embed_tokens,lm_head"
    )
    assert any(p.requires_grad for p in model.get_input_embeddings().parameters())  # peft's trained copy


def test_plain_tokens_are_added_and_started_like_special_ones(tiny_qwen):
    """LLaMA-Factory's add_tokens: non-special tokens (a word the data then tokenizes as one), their rows set too."""
    model, tokenizer = _load(tiny_qwen, add_tokens="zzqx_word", add_special_tokens="<|tool_a|>")
    (plain,) = _ids(tokenizer, ["zzqx_word"])
    assert tokenizer("say zzqx_word", add_special_tokens=False)["input_ids"][-1] == plain
    assert "zzqx_word" not in tokenizer.all_special_tokens and "<|tool_a|>" in tokenizer.all_special_tokens
    rows = model.get_input_embeddings().weight
    original = _original_embedding(tiny_qwen)
    mean = original[: len(tokenizer) - 2].mean(dim=0)
    bound = 6 / math.sqrt(rows.shape[1])  # noise std 1/sqrt(d): 6 sigma per element
    for token_id in _ids(tokenizer, ["zzqx_word", "<|tool_a|>"]):
        assert (rows[token_id] - mean).abs().max() < bound and not torch.equal(rows[token_id], original[token_id])
