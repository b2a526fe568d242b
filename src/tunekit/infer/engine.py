"""The one inference path: render with the training template -> tokenize -> ``generate`` -> stream text.

``tunekit chat``, ``tunekit api``, ``tunekit predict`` and the web board's Chat tab all go through
:class:`ChatEngine`, so a model answers the same everywhere (same prompt text, same stop tokens), and a reasoning
model's reply is split into its thought and its answer the same way everywhere (:mod:`tunekit.infer.reasoning`).

Concurrency: a ``ChatEngine`` holds one model; generations **take turns** on it (``ChatEngine.lock``, a
:class:`tunekit.infer.turns.Turns`): one runs at a time, first come first served, and a running one hands its turn
on every few tokens while others wait, so concurrent API requests interleave (a short reply is never stuck
behind a long one) and never mix outputs (each keeps its own cache and random state). Batching happens only
inside :meth:`ChatEngine.generate_batch` (predict), which holds one whole turn. A composite model (vision-language,
omni: ``config.sub_configs``) keeps generation state on its modules between steps (Qwen2-VL's ``rope_deltas``),
so there a generation holds its turn from its first token to its last (``ChatEngine.interleaves`` is False).
:meth:`Generation.cancel` (any thread) ends a generation at its next token, or while it waits for its turn: the
API calls it when a client goes away or the server stops.

Randomness: a reply is sampled from fresh randomness unless a seed is given (the call's ``seed``, else the
``generation_seed`` option); reply ``i`` of ``n`` uses :func:`choice_seed` (seed + i), so the ``n`` replies are
independent and a seeded request is reproducible. The training ``seed`` is not used here (predict passes it).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.problems import Problem, Said, config_error
from ..config.schema import Config
from ..data.mm_plugins import load_plugin, resolve_media
from ..data.pipeline import load_template
from ..errors import ConfigError, DataError, EnvironmentProblem
from ..model.loader import load_model, load_tokenizer
from ..model.stops import generation_stops
from .media_prompt import family_template, jinja_hint
from .options import apply_seed, choice_seed, generation_options
from .reasoning import ANSWER, THOUGHT, Part, join_parts, keeps_markup, reply_splitter
from .stops import ReplyStops
from .turns import QUANTUM, RandomState, Turns
from .untrusted import encode_untrusted, plain_messages


@dataclass
class Response:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (a stop word/string or EOS) or "length" (max_new_tokens reached)
    reasoning: str = ""  # a reasoning model's thought (``text`` is then the answer: infer/reasoning.py)


class _IdStreamer:
    """A ``generate`` streamer that hands new token ids to the consumer thread (first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.queue.put(value.reshape(-1).tolist())

    def end(self) -> None:
        self.queue.put(None)


def _turn_criteria(event: threading.Event, turns: Turns, who: Any, interleave: bool = True):
    import torch
    from transformers import StoppingCriteria

    class TakeTurns(StoppingCriteria):
        """Stops ``generate`` when the consumer is done (stop string found, client gone); every ``QUANTUM`` tokens
        hands the turn on to the generations that wait (keeping this one's random state for its next turn)."""

        steps = 0

        def __call__(self, input_ids, scores, **kwargs):
            self.steps += 1
            if interleave and self.steps % QUANTUM == 0 and turns.waiting() and not event.is_set():
                state = RandomState()
                if turns.share(who, event.is_set):
                    state.restore()
            return torch.full((input_ids.shape[0],), event.is_set(), dtype=torch.bool, device=input_ids.device)

    return TakeTurns()


class Generation:
    """Iterate for the answer's text deltas (or :meth:`parts` for the thought's too); afterwards ``text`` (the
    answer), ``reasoning`` (a reasoning model's thought), ``completion_tokens`` and ``finish_reason`` are set."""

    def __init__(self, engine: ChatEngine, prompt_ids: list[int], gen: dict[str, Any], media: dict | None = None):
        self.engine = engine
        self.prompt_ids = prompt_ids
        self.media = media or {}  # a vision-language model's image inputs for this prompt (ChatEngine.render_media)
        self.kwargs, self.user_stops, self.seed = generation_options(engine.cfg, gen)
        self.text = self.reasoning = ""
        self.completion_tokens = 0
        self.finish_reason = "stop"
        self.seconds = 0.0
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """End this generation at its next token (or before it starts); safe from any thread."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0

    def response(self) -> Response:
        return Response(self.text, self.prompt_tokens, self.completion_tokens, self.finish_reason, self.reasoning)

    def __iter__(self) -> Iterator[str]:
        yield from (text for kind, text in self.parts() if kind == ANSWER)

    def parts(self) -> Iterator[Part]:
        """``(kind, text)`` deltas: ``reasoning`` while a reasoning model's thought streams, ``content`` for the
        answer (:mod:`tunekit.infer.reasoning`)."""
        for parts in self._run():
            yield from self._record(parts)

    def _record(self, parts: list[Part]) -> list[Part]:
        for kind, text in parts:
            if kind == THOUGHT:
                self.reasoning += text
            else:
                self.text += text
        return parts

    def _run(self) -> Iterator[list[Part]]:
        """The reply's parts as it streams, the stops applied (:class:`tunekit.infer.stops.ReplyStops`)."""
        import torch

        eng = self.engine
        if self._cancel.is_set():
            return
        streamer, cancel = _IdStreamer(), self._cancel
        errors: list[BaseException] = []
        inputs = torch.tensor([self.prompt_ids], device=eng.device)
        media = {k: v.to(eng.device) for k, v in self.media.items()}
        beams = self.kwargs["num_beams"] > 1  # beam search cannot stream: the whole reply comes at the end

        def work() -> None:
            try:
                if not eng.lock.acquire(self, cancel.is_set):  # cancelled while waiting for the first turn
                    return
                apply_seed(self.seed)
                with torch.inference_mode():
                    out = eng.model.generate(
                        input_ids=inputs,
                        attention_mask=torch.ones_like(inputs),
                        eos_token_id=eng.stop_ids,
                        pad_token_id=eng.pad_id,
                        use_cache=True,
                        streamer=None if beams else streamer,
                        stopping_criteria=[_turn_criteria(cancel, eng.lock, self, eng.interleaves)],
                        **media,
                        **self.kwargs,
                    )
                if beams:
                    streamer.queue.put(out[0, inputs.shape[1] :].tolist())
            except BaseException as exc:  # re-raised in the consumer thread
                errors.append(exc)
            finally:  # the model is free as soon as generate returns, however slowly the consumer reads
                eng.lock.release(self)
                streamer.end()

        stop = ReplyStops(eng.reply_splitter(), self.user_stops, eng.text_stops)
        ids: list[int] = []
        start = time.perf_counter()
        thread = threading.Thread(target=work, daemon=True, name="tunekit-generate")
        thread.start()
        try:
            while True:
                item = streamer.queue.get()
                if item is None:
                    break
                ids.extend(t for t in item if not (beams and t == eng.pad_id and eng.pad_id not in eng.stop_ids))
                text = eng.decode_reply(ids)
                if text.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for the next token
                    continue
                yield stop.feed(text)
                if stop.hit:
                    break
            if errors:
                raise errors[0]
            if not stop.hit:
                yield stop.feed(eng.decode_reply(ids), final=True)
        finally:
            cancel.set()
            thread.join()
            self.seconds = time.perf_counter() - start
            self.completion_tokens = len(ids)
            ended = stop.hit or (ids and ids[-1] in eng.stop_ids)
            self.finish_reason = "stop" if ended or len(ids) < self.kwargs["max_new_tokens"] else "length"


class ChatEngine:
    """A loaded model + tokenizer + template (base, base + adapters, or an exported folder)."""

    def __init__(self, cfg: Config, *, model: Any = None, tokenizer: Any = None, template: Any = None):
        if cfg.infer_backend == "vllm":
            raise EnvironmentProblem(_vllm_message())
        self.lock = Turns()  # generations take turns on the model (module docstring)
        # held while the tokenizer encodes: a fast tokenizer's split_special_tokens is shared state, and the API
        # renders prompts in worker threads
        self.encode_lock = threading.RLock()
        if tokenizer is None:
            tokenizer = load_tokenizer(cfg, padding_side="left")
        folder_template = getattr(tokenizer, "chat_template", None)
        if not cfg.template and family_template(
            cfg, folder_template
        ):  # a vision-language folder: its family's template
            cfg = cfg.model_copy(update={"template": family_template(cfg, folder_template)})
        if not cfg.template:
            if not getattr(tokenizer, "chat_template", None):
                raise config_error("infer_no_template", ("template",))
            cfg = cfg.model_copy(update={"template": "jinja"})  # an exported folder carries its template
        self.cfg = cfg
        self.template = template if template is not None else load_template(cfg, tokenizer)
        # a vision-language model's family plugin (images in chat); "jinja" renders text only (media_prompt.jinja_hint)
        self.mm = load_plugin(cfg, cfg.template) if cfg.template != "jinja" else None
        if model is None:
            model = load_model(cfg.model_copy(update={"dtype": inference_dtype(cfg)}), tokenizer, is_trainable=False)
            if (
                _cuda()
                and next(model.parameters()).device.type == "cpu"
                and getattr(model, "hf_quantizer", None) is None
            ):
                model.to("cuda")
        self.model, self.tokenizer = model, tokenizer
        # generations interleave token by token unless the model keeps generation state on its modules (docstring)
        self.interleaves = not getattr(getattr(model, "config", None), "sub_configs", None)
        self.device = next(model.parameters()).device
        self.stop_ids, self.text_stops = self._stops()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]

    def _stops(self) -> tuple[list[int], list[str]]:
        """Stop words that are one token end ``generate``; longer ones are cut from the text. The model's own end
        tokens (``generation_config.eos_token_id``: Qwen's ``<|endoftext|>`` next to ``<|im_end|>``) end it too, as
        in plain ``model.generate`` (:func:`tunekit.model.stops.generation_stops`, shared with the rollouts)."""
        return generation_stops(self.tokenizer, self.template, getattr(self.model, "generation_config", None))

    # ------------------------------------------------------------------ the one path
    def render(
        self, messages: Sequence[dict], system: str | None = None, tools: Any = None, parse_special_tokens: bool = True
    ) -> list[int]:
        """Prompt token ids, rendered exactly as in training (the template, then the tokenizer without extras).

        ``parse_special_tokens=False`` (the API's default): control-token text written *in* the messages or the
        system text (``<|im_end|>``) is encoded as ordinary text, never as the control token, so a client cannot
        forge role boundaries; see :func:`tunekit.infer.untrusted.encode_untrusted`. Messages without such text
        give exactly the ids of the default path. A message's content may be a list of pieces
        (:class:`tunekit.infer.untrusted.Trusted` ones are tunekit's own text: media token runs).
        """
        system = system or self.cfg.default_system or None
        args = (list(messages), system, tools or None, self.cfg.enable_thinking)
        keep = {"preserve_thinking": self.cfg.preserve_thinking}  # earlier replies' thoughts, as in training
        with self.encode_lock:
            if not parse_special_tokens:
                return encode_untrusted(self.template, self.tokenizer, *args, **keep)
            text = self.template.render_prompt(plain_messages(args[0]), *args[1:], **keep)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def context_length(self) -> int | None:
        """Tokens the model can attend to (prompt + reply): ``max_position_embeddings`` of its config, if it says."""
        config = getattr(self.model, "config", None)
        value = getattr(config, "max_position_embeddings", None) if config is not None else None
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def most_chars_per_token(self) -> int:
        """The characters of the tokenizer's longest token (a byte-level token: its bytes), so a prompt of more than
        ``context_length × this`` characters cannot fit, whatever its text (the API refuses it without tokenizing)."""
        if getattr(self, "_most_chars", None) is None:
            self._most_chars = max((len(t) for t in self.tokenizer.get_vocab()), default=0)
        return self._most_chars

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def decode_reply(self, ids: list[int]) -> str:
        """Generated ids as the reply's splitter reads them: harmony's channel tokens kept (infer/reasoning.py), the
        stop token that ended generation not (gpt-oss's ``<|endoftext|>`` is no reply text)."""
        if not keeps_markup(self.template):
            return self.decode(ids)
        return self.tokenizer.decode(ids[:-1] if ids and ids[-1] in self.stop_ids else ids, skip_special_tokens=False)

    def reply_splitter(self):
        """A new splitter of a reply into thought and answer, for this template and ``enable_thinking``."""
        return reply_splitter(self.template, self.cfg.enable_thinking)

    def render_media(
        self, messages: Sequence[dict], images: Sequence[str], system: str | None = None, tools: Any = None
    ) -> tuple[list[int], dict]:
        """Prompt ids with each ``<image>`` expanded as in training (``data/mm_plugins``), and the image inputs.

        Messages without any ``<image>`` get one per image at the start of the last user message."""
        import torch

        if self.mm is None:
            hint = jinja_hint(self.cfg, "images")
            if hint:
                raise ConfigError(hint, [Problem(hint, ("template",))])
            raise config_error("infer_images_text_template", ("template",), template=self.cfg.template)
        paths = resolve_media(list(images), "images", Path.cwd(), "chat")
        msgs = [dict(m) for m in messages]
        placed = sum(str(m.get("content", "")).count("<image>") for m in msgs)
        if placed == 0:
            last = max(i for i, m in enumerate(msgs) if m["role"] == "user")
            msgs[last]["content"] = "<image>" * len(paths) + msgs[last]["content"]
        elif placed != len(paths):
            raise DataError(Said("infer_image_placeholders", placed=placed, given=len(paths)))
        counts, k = self.mm.image_token_counts(paths, "chat"), 0
        for m in msgs:
            m["content"], k = self.mm.expand(m["content"], counts, k)
        ids = self.render(msgs, system, tools)
        return ids, self.mm.collate(paths, torch.tensor([ids]))

    def start(
        self,
        messages: Sequence[dict],
        system: str | None = None,
        tools: Any = None,
        images: Sequence[str] | None = None,
        **gen: Any,
    ) -> Generation:
        """A :class:`Generation` (not started: iterate it). Options are checked here, before any work."""
        if images:
            ids, media = self.render_media(messages, images, system, tools)
            return Generation(self, ids, gen, media)
        return Generation(self, self.render(messages, system, tools), gen)

    def start_ids(self, prompt_ids: list[int], media: dict | None = None, **gen: Any) -> Generation:
        """A :class:`Generation` for prompt ids rendered already (:meth:`render`, or ``infer.media_prompt`` with its
        ``media`` inputs)."""
        return Generation(self, list(prompt_ids), gen, media)

    def stream_chat(
        self,
        messages: Sequence[dict],
        system: str | None = None,
        tools: Any = None,
        images: Sequence[str] | None = None,
        **gen: Any,
    ) -> Iterator[str]:
        yield from self.start(messages, system, tools, images=images, **gen)

    def stream_parts(
        self,
        messages: Sequence[dict],
        system: str | None = None,
        tools: Any = None,
        images: Sequence[str] | None = None,
        **gen: Any,
    ) -> Iterator[Part]:
        """``(kind, text)`` deltas: a reasoning model's thought (``reasoning``), then its answer (``content``)."""
        yield from self.start(messages, system, tools, images=images, **gen).parts()

    def chat(
        self, messages: Sequence[dict], system: str | None = None, tools: Any = None, n: int = 1, **gen: Any
    ) -> list[Response]:
        out = []
        seed = gen.get("seed") if gen.get("seed") is not None else getattr(self.cfg, "generation_seed", None)
        for i in range(n):
            generation = self.start(messages, system, tools, **{**gen, "seed": choice_seed(seed, i)})
            for _delta in generation:
                pass
            out.append(generation.response())
        return out

    # ------------------------------------------------------------------ batches (predict)
    def generate_batch(self, prompts: list[list[int]], media: dict | None = None, **gen: Any) -> list[Response]:
        """Greedy/sampled generation for several prompts at once (left padding); same stops as streaming.
        ``media``: a vision-language model's inputs for these prompts (``infer.media_prompt``; predict passes one
        prompt with its media at a time)."""
        import torch

        kwargs, user_stops, seed = generation_options(self.cfg, gen)
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        inputs = {k: v.to(self.device) for k, v in (media or {}).items()}
        with self.lock, torch.inference_mode():
            apply_seed(seed)
            was_training = self.model.training
            self.model.eval()
            try:
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=mask,
                    eos_token_id=self.stop_ids,
                    pad_token_id=self.pad_id,
                    use_cache=True,
                    **inputs,
                    **kwargs,
                )
            finally:
                self.model.train(was_training)
        results = []
        for prompt, row in zip(prompts, out[:, width:].tolist()):
            ids, ended = [], False
            for t in row:
                ids.append(t)
                if t in self.stop_ids:
                    ended = True
                    break
            stop = ReplyStops(self.reply_splitter(), user_stops, self.text_stops)
            reasoning, answer = join_parts(stop.feed(self.decode_reply(ids), final=True))
            finish = "stop" if ended or stop.hit or len(ids) < kwargs["max_new_tokens"] else "length"
            results.append(Response(answer, len(prompt), len(ids), finish, reasoning))
        return results


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def inference_dtype(cfg: Config) -> str:
    """infer_dtype; ``auto``: the training dtype option if set, else bf16 (fp16 without bf16 support) on a GPU,
    fp32 on CPU."""
    if cfg.infer_dtype != "auto":
        return cfg.infer_dtype
    if cfg.dtype != "auto":
        return cfg.dtype
    if not _cuda():
        return "float32"
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def _vllm_message() -> Said:
    import importlib.util

    return Said("infer_vllm_missing" if importlib.util.find_spec("vllm") is None else "infer_vllm_not_served")
