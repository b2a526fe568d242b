"""A scalar head on a causal LM: the reward model (stage rm) and the PPO critic.

``ValueHeadModel`` wraps the LM (a ``PreTrainedModel`` or, with LoRA, a ``PeftModel``) and a
``Linear(hidden, 1)`` applied to the last hidden state of every position. On disk it is the LM as
usual (``model.safetensors`` or the LoRA adapter) plus ``value_head.safetensors`` with the keys
``v_head.summary.weight`` / ``v_head.summary.bias`` (LLaMA-Factory's names), so
:func:`load_value_head_model` — or plain ``transformers`` + ``safetensors`` — reloads it. The Trainer saves and resumes
both through ``train/checkpoint_weights.CheckpointWeightsMixin``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from ...config.problems import Said
from ...config.schema import Config
from ...errors import ModelError
from ...model.multimodal import model_class
from ...model.pickles import check_adapter_folder
from ..batching import segment_last

VALUE_HEAD_FILE = "value_head.safetensors"


class ValueHeadModel(nn.Module):
    main_input_name = "input_ids"

    def __init__(self, pretrained_model: nn.Module):
        super().__init__()
        self.pretrained_model = pretrained_model
        config = self.config
        hidden = getattr(config, "hidden_size", None) or config.get_text_config().hidden_size
        self.v_head = nn.Linear(hidden, 1)
        nn.init.normal_(self.v_head.weight, std=1.0 / (hidden + 1))
        nn.init.zeros_(self.v_head.bias)
        first = next(pretrained_model.parameters())
        # float32 at least (a half-precision head rounds the scores); a float64 model (reference runs) keeps float64
        self.v_head.to(device=first.device, dtype=torch.float64 if first.dtype == torch.float64 else torch.float32)

    @property
    def config(self):
        return self.pretrained_model.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        """Returns ``(logits, values)``; ``values[:, t]`` is the head applied to position ``t``."""
        out = self.pretrained_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=True,
            use_cache=False,
            **kwargs,
        )
        hidden = out.hidden_states[-1]
        values = self.v_head(hidden.to(self.v_head.weight.dtype)).squeeze(-1)
        return out.logits, values

    def score(self, input_ids, attention_mask, **media) -> torch.Tensor:
        """One score per sequence: the value at its last non-padding token (right padding); ``media``: a
        vision-language model's media inputs for these rows (``reference_policy.MEDIA_INPUTS``)."""
        _, values = self(input_ids, attention_mask=attention_mask, **media)
        return last_token_values(values, attention_mask)

    def gradient_checkpointing_enable(self, **kwargs):
        self.pretrained_model.gradient_checkpointing_enable(**kwargs)

    def value_head_state(self) -> dict[str, torch.Tensor]:
        return {f"v_head.summary.{k}": v.detach().cpu().contiguous() for k, v in self.v_head.state_dict().items()}

    def load_value_head(self, folder: str | os.PathLike) -> None:
        from safetensors.torch import load_file

        state = load_file(str(Path(folder) / VALUE_HEAD_FILE))
        self.v_head.load_state_dict({k.split("v_head.summary.")[-1]: v for k, v in state.items()})

    def save_pretrained(self, folder: str | os.PathLike, state_dict: dict | None = None, **kwargs) -> None:
        """The LM (or adapter) as usual + ``value_head.safetensors``. ``state_dict`` (this module's keys) is the
        gathered state of a sharded model (DeepSpeed ZeRO-3), whose own parameters are empty partitions."""
        from safetensors.torch import save_file

        head = self.value_head_state()
        if state_dict is not None:
            lm_prefix, head_prefix = "pretrained_model.", "v_head."
            head = {
                f"v_head.summary.{k[len(head_prefix) :]}": v.detach().cpu().contiguous()
                for k, v in state_dict.items()
                if k.startswith(head_prefix)
            }
            kwargs["state_dict"] = {k[len(lm_prefix) :]: v for k, v in state_dict.items() if k.startswith(lm_prefix)}
        self.pretrained_model.save_pretrained(folder, **kwargs)
        save_file(head, str(Path(folder) / VALUE_HEAD_FILE), metadata={"format": "pt"})


def with_value_head(lm, cfg: Config) -> ValueHeadModel:
    """Wrap the loaded LM; a head saved next to the model or its last adapter (a trained reward model) is reloaded."""
    model = ValueHeadModel(lm)
    candidates = [cfg.model_name_or_path] + cfg.adapter_paths
    for path in reversed(candidates):
        if path and (Path(path) / VALUE_HEAD_FILE).is_file():
            model.load_value_head(path)
            break
    return model


def last_token_values(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    last = attention_mask.long().sum(-1) - 1
    return values.gather(1, last.clamp(min=0).unsqueeze(1)).squeeze(1)


def sequence_scores(values: torch.Tensor, view: dict) -> torch.Tensor:
    """One score per sequence of a batch view (``train/batching.sequence_view``): the value at the last real token of
    each padded row, or at the last token of each sequence of a padding-free row."""
    if view.get("cu_seqlens") is not None:
        return segment_last(values, view["cu_seqlens"])
    return last_token_values(values, view["attention_mask"])


def load_value_head_model(path: str | os.PathLike, base: str | None = None, dtype=torch.float32) -> ValueHeadModel:
    """Reload a saved reward model / critic: a full model folder, or a LoRA adapter folder (merged into ``base``,
    default: the adapter's ``base_model_name_or_path``); both with ``value_head.safetensors``. A vision-language model
    loads with its own class (``model.multimodal.model_class``)."""
    from transformers import AutoConfig

    folder = Path(path)
    if not (folder / VALUE_HEAD_FILE).is_file():
        raise ModelError(Said("value_head_missing", path=str(folder), file=VALUE_HEAD_FILE))
    adapter_cfg = folder / "adapter_config.json"
    if adapter_cfg.is_file():
        from peft import PeftModel
        from transformers.integrations import is_deepspeed_zero3_enabled

        check_adapter_folder(folder)  # a crafted adapter_model.bin: a one-line error naming it, before PEFT loads it
        base = base or json.loads(adapter_cfg.read_text())["base_model_name_or_path"]
        lm = PeftModel.from_pretrained(
            model_class(AutoConfig.from_pretrained(base)).from_pretrained(base, dtype=dtype), str(folder)
        )
        # ZeRO-3 loaded the base partitioned: the adapter stays beside it, unmerged; a prefix/prompt cannot merge
        if not is_deepspeed_zero3_enabled() and not lm.active_peft_config.is_prompt_learning:
            lm = lm.merge_and_unload()
    else:
        lm = model_class(AutoConfig.from_pretrained(str(folder))).from_pretrained(str(folder), dtype=dtype)
    model = ValueHeadModel(lm)
    model.load_value_head(folder)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model
