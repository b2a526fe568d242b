"""The tokenizer and chat template an export carries: the configured template, else the tokenizer's own (jinja)."""

from __future__ import annotations

from ..config.schema import Config
from ..data.pipeline import load_template
from ..errors import ConfigError
from ..model.loader import load_tokenizer


def export_tokenizer_and_template(cfg: Config, what: str = "model"):
    """``(cfg, tokenizer, template)``: ``cfg`` with ``template: jinja`` when it names none and the tokenizer has a
    chat template of its own; an error naming the option when neither says how ``what`` was trained to chat."""
    tokenizer = load_tokenizer(cfg)
    if not cfg.template:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                f"template is not set: name the chat template the {what} was trained with (e.g. qwen), so the "
                "export carries it; `tunekit templates` lists them."
            )
        cfg = cfg.model_copy(update={"template": "jinja"})
    return cfg, tokenizer, load_template(cfg, tokenizer)
