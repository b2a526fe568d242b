"""The Chat tab's model: ``tunekit.infer.engine.ChatEngine`` (the same engine as ``tunekit chat``).

Until the infer layer exists in a build, :class:`_MinimalEngine` streams with plain transformers
(the tokenizer's own chat template, optional LoRA adapter); it keeps the same
``stream_chat(messages, system=None, **gen) -> Iterator[str]`` contract and goes away once the engine
is there.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator


def engine_class():
    try:
        from tunekit.infer.engine import ChatEngine
    except ImportError:
        return _MinimalEngine
    return ChatEngine


class ChatSession:
    """One loaded model per board (loading is slow; every page shares it)."""

    def __init__(self) -> None:
        self.engine = None
        self.description = ""
        self._lock = threading.Lock()

    def load(self, cfg) -> str:
        with self._lock:
            self.engine = None
            self.engine = engine_class()(cfg)
            adapter = f" + {cfg.adapter_name_or_path}" if cfg.adapter_name_or_path else ""
            self.description = f"{cfg.model_name_or_path}{adapter}"
            return self.description

    def unload(self) -> None:
        with self._lock:
            self.engine = None
            self.description = ""
            import gc

            gc.collect()

    @property
    def loaded(self) -> bool:
        return self.engine is not None

    def stream(self, messages: list[dict[str, str]], system: str | None, **gen: Any) -> Iterator[str]:
        if self.engine is None:
            raise RuntimeError("no model loaded")
        yield from self.engine.stream_chat(messages, system=system or None, **gen)


class _MinimalEngine:
    """Plain transformers streaming, used only while tunekit.infer is absent from the build."""

    def __init__(self, cfg) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = cfg
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model_name_or_path, trust_remote_code=cfg.trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            cfg.model_name_or_path, trust_remote_code=cfg.trust_remote_code, dtype=torch.float32,
        )
        if cfg.adapter_name_or_path:
            from peft import PeftModel

            for path in [p.strip() for p in cfg.adapter_name_or_path.split(",") if p.strip()]:
                model = PeftModel.from_pretrained(model, path)
                model = model.merge_and_unload()
        self.model = model.eval()

    def stream_chat(self, messages, system=None, **gen) -> Iterator[str]:
        from transformers import TextIteratorStreamer

        msgs = ([{"role": "system", "content": system}] if system else []) + list(messages)
        ids = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        cfg = self.cfg
        kwargs = dict(
            max_new_tokens=gen.get("max_new_tokens", cfg.max_new_tokens), do_sample=gen.get("do_sample", cfg.do_sample),
            temperature=gen.get("temperature", cfg.temperature), top_p=gen.get("top_p", cfg.top_p),
            top_k=gen.get("top_k", cfg.top_k), repetition_penalty=gen.get("repetition_penalty", cfg.repetition_penalty),
            pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        )
        thread = threading.Thread(target=self.model.generate, kwargs=dict(**ids, streamer=streamer, **kwargs), daemon=True)
        thread.start()
        yield from streamer
        thread.join()
