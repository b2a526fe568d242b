"""Token level: on the tiny tokenizers of each family, tunekit's pieces tokenize to what inference tokenizes."""

from __future__ import annotations

import pytest

from tunekit.data.templates import get_template

tiny = pytest.importorskip("tunekit.tiny.tokenizer")

CONV = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris is the capital."},
    {"role": "user", "content": "And of Italy?"},
    {"role": "assistant", "content": "Rome."},
]


@pytest.fixture(scope="module")
def tokenizers():
    return {
        name: tiny.build_tokenizer(fam, 2000, tiny.chat_template_for(fam.template), 512)
        for name, fam in tiny.TOKENIZERS.items()
    }


@pytest.mark.parametrize("family", sorted(tiny.TOKENIZERS))
def test_pieces_tokenize_like_the_whole_and_like_inference(tokenizers, family):
    tok = tokenizers[family]
    tpl = get_template(tiny.TOKENIZERS[family].template, tok)
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    turns = tpl.encode_turns(CONV, system="Be brief.", strip_history_thoughts=True)
    pieces = [ids(text) for pair in turns for text in pair]
    assert sum(pieces, []) == ids("".join(p + r for p, r in turns))
    # the prompt part of the last turn is token-identical to the inference prompt (tokenizer's own template)
    hf = [{"role": "system", "content": "Be brief."}] + CONV[:3]
    inference = tpl.render_prompt(CONV[:3], system="Be brief.")
    # gpt_oss: its official template writes today's date (test_template_gpt_oss.py pins it on a fixed day)
    if family != "gpt_oss":
        assert tok.apply_chat_template(hf, tokenize=False, add_generation_prompt=True) == inference
    assert sum(pieces[:3], []) == ids(inference)
    # the trained part of each turn ends with the end-of-turn token (harmony's history: a final message ends with
    # <|end|>, which is no stop word: it also ends the analysis message before the answer)
    stop_ids = {tok.convert_tokens_to_ids(w) for w in tpl.stop_words}
    history_end = {tok.convert_tokens_to_ids("<|end|>")} if family == "gpt_oss" else stop_ids
    assert pieces[1][-1] in history_end and pieces[3][-1] in stop_ids
