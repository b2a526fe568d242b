"""A real tiny model made to write a chosen reply: its ``generate`` (real sampling, streaming and stopping) with a
logits processor that leaves only the scripted token possible at each step, so the API, chat and predict can be
tested on what a trained reasoning model writes (a random model writes noise)."""

from __future__ import annotations

from typing import Any


def scripted_processor(ids: list[int], prompt_len: int):
    import torch
    from transformers import LogitsProcessor

    class ForceIds(LogitsProcessor):
        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - prompt_len
            if step < len(ids):
                forced = torch.full_like(scores, float("-inf"))
                forced[:, ids[step]] = 0.0
                return forced
            return scores

    return ForceIds()


class ScriptedModel:
    """``model`` whose ``generate`` writes ``ids`` (end them with a stop token) whatever it would have written."""

    def __init__(self, model: Any, ids: list[int]):
        self._model, self.ids = model, list(ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def generate(self, *, input_ids, **kwargs):
        from transformers import LogitsProcessorList

        processors = LogitsProcessorList([scripted_processor(self.ids, input_ids.shape[1])])
        return self._model.generate(input_ids=input_ids, logits_processor=processors, **kwargs)


def scripted_engine(folder, reply: str, **options):
    """A :class:`ChatEngine` on the tiny model in ``folder`` that answers every prompt with the text ``reply``
    (tokenized as written: control tokens as their ids)."""
    from transformers import AutoModelForCausalLM

    from tunekit.config import load_config
    from tunekit.infer.engine import ChatEngine
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(None, {"model_name_or_path": str(folder), "max_new_tokens": 64, **options})
    tokenizer = load_tokenizer(cfg, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    return ChatEngine(cfg, model=ScriptedModel(model, ids), tokenizer=tokenizer)
