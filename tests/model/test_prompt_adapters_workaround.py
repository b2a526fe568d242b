"""tunekit's one workaround for a peft bug (``model/prompt_adapters.fixed_generation``, written for peft 0.21.2 with
transformers 5): peft's prompt-learning generation step reads the KV cache as ``past_key_values``, which transformers
now passes as ``cache``. These tests fail, telling us to delete the workaround, once peft is upgraded (the pin), once
peft drops the name it replaces, and once the installed peft generates with the cache itself (the bug is gone)."""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.helpers import ROOT
from tests.prompt_adapter_helpers import peft_prompt_model


def _pins() -> dict[str, str]:
    return dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split() if "==" in line)


def _peft_model(tiny_qwen, kind: str):
    return peft_prompt_model(tiny_qwen, kind, steer=True).eval()


def test_the_workaround_is_for_the_pinned_peft():
    """An upgrade of peft must look at the workaround again: delete it if the new release fixed the bug (the test
    below tells), else set FIXED_GENERATION_PEFT to the release it was checked with."""
    import peft

    from tunekit.model.prompt_adapters import FIXED_GENERATION_PEFT

    assert peft.__version__ == _pins()["peft"] == FIXED_GENERATION_PEFT


def test_the_name_the_workaround_replaces_still_exists(tiny_qwen):
    """fixed_generation replaces ``base_model_prepare_inputs_for_generation``, the attribute peft sets in
    ``PeftModel.__init__`` and its CausalLM generation step calls."""
    from peft import PeftModelForCausalLM

    model = _peft_model(tiny_qwen, "ptuning")
    assert isinstance(model, PeftModelForCausalLM)
    assert callable(model.base_model_prepare_inputs_for_generation)
    source = inspect.getsource(PeftModelForCausalLM.prepare_inputs_for_generation)
    assert "self.base_model_prepare_inputs_for_generation(" in source


@pytest.mark.parametrize("kind", ["ptuning", "prompt"])
def test_plain_peft_generation_still_misses_the_cache(kind, tiny_qwen):
    """Greedy decoding must equal the argmax of a full forward of the prompt + the tokens so far, step by step. With
    the workaround it does; plain peft's ``generate`` does not (the bug: a prefix is ignored, so the reply is the base
    model's; a prompt is put in front of each new token again). When the last asserts fail, the installed peft
    generates with the cache: delete ``fixed_generation`` and its calls."""
    from tunekit.model.prompt_adapters import fixed_generation

    model = _peft_model(tiny_qwen, kind)
    ids = [5, 17, 33, 99, 120, 7, 42, 11] if kind == "ptuning" else [9]
    eos = model.generation_config.eos_token_id
    stop = set(eos if isinstance(eos, list) else [eos]) - {None}
    new: list[int] = []
    with torch.no_grad():
        while len(new) < 8 and not (new and new[-1] in stop):
            new.append(int(model(input_ids=torch.tensor([ids + new])).logits[0, -1].argmax()))

        def generated(m) -> list[int]:
            return m.generate(input_ids=torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, len(ids) :].tolist()

        with model.disable_adapter():
            base = generated(model)
        plain = generated(model)
        fixed = generated(fixed_generation(model))
    assert new != base  # the prefix / prompt changes the reply
    assert fixed == new  # the workaround
    assert plain != new, f"peft generates with the cache now: delete model/prompt_adapters.fixed_generation ({kind})"
    if kind == "ptuning":
        assert plain == base  # the bug as it is: the prefix is ignored
