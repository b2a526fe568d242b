"""``tunekit predict`` / ``do_predict``: generate a reply for every sample of a dataset and score it.

Prompts are rendered by the engine (the training template), sorted by length and generated in left-padded
batches of ``per_device_eval_batch_size`` (less padding, same results as one by one with greedy decoding);
the outputs go back to dataset order. Writes ``generated_predictions.jsonl`` (``prompt``, ``predict``,
``label``: LLaMA-Factory's field names) and ``predict_results.json`` (``predict_bleu-4``,
``predict_rouge-1/2/l``, ``predict_exact_match``, runtime and generated tokens/s). Sampled predictions are
seeded with the training ``seed`` (as LLaMA-Factory's do_predict is), so a rerun predicts the same.

Reasoning models (templates with thought markers, :mod:`tunekit.infer.reasoning`): ``predict`` is the answer, the
thought goes to a ``reasoning`` field, ``label`` is the record's answer without its thought, and the metrics compare
answer with answer. LLaMA-Factory writes and scores the whole decoded reply, ``<think>`` block included (its
``save_predictions`` / ``ComputeSimilarity``), so its scores of a reasoning model mostly measure the thought.

Multimodal eval sets (``images`` / ``videos`` / ``audios`` columns, as for training): each sample's media are
resolved against ``media_dir`` (else ``dataset_dir``) and its placeholders expanded as in training
(:func:`tunekit.infer.media_prompt.render_sample`); such samples are generated one at a time with their media
inputs (text-only samples keep the batches). A multimodal prompt longer than ``cutoff_len`` is an error naming
the record (cutting it would cut through an image's tokens).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..config.problems import Said, config_error, message_of
from ..config.schema import Config
from ..data.dataset_info import resolve_datasets
from ..data.formats import RecordError, convert_record
from ..data.mm_plugins import PLACEHOLDERS, media_root, resolve_media
from ..data.readers import read_records
from ..data.sampling import select_records
from ..data.templates.base import split_thought
from ..errors import DataError
from .engine import ChatEngine
from .media_prompt import render_sample
from .metrics import score_predictions
from .reasoning import has_thought_markers

PREDICTIONS = "generated_predictions.jsonl"
RESULTS = "predict_results.json"


def load_samples(cfg: Config) -> list[dict[str, Any]]:
    """``{"messages", "system", "tools", "label", "media", "where"}`` per record of eval_dataset (else dataset); the
    last reply is the label, ``media`` the record's resolved media paths per kind (empty for text)."""
    names = cfg.eval_dataset_names or cfg.dataset_names
    if not names:
        raise config_error("predict_no_data", ("eval_dataset", "dataset"))
    samples = []
    for attr in resolve_datasets(names, cfg.dataset_dir):
        raws = read_records(attr, cache_dir=cfg.cache_dir, bad_records=cfg.bad_records)
        raws, _ = select_records(raws, attr.name, attr.num_samples, cfg)  # the records training evaluates
        for raw in raws:
            try:
                sample = convert_record(raw, attr, "sft")
                media = {
                    k: resolve_media(sample.get(k) or [], k, media_root(cfg), sample["_source"]) for k in PLACEHOLDERS
                }
            except (RecordError, DataError) as exc:
                if cfg.bad_records == "error":
                    raise DataError(Said("predict_bad_record", error=message_of(exc), name=attr.name)) from None
                continue
            messages = sample["messages"]
            samples.append(
                {
                    "messages": messages[:-1],
                    "system": sample.get("system") or None,
                    "tools": sample.get("tools") or None,
                    "label": messages[-1]["content"],
                    "media": media,
                    "where": sample["_source"],
                }
            )
    if not samples:
        raise DataError(Said("predict_no_samples", names=tuple(names)))
    return samples


def run_predict(cfg: Config, engine: Any = None, output_dir: str | Path | None = None) -> dict[str, float]:
    out = Path(output_dir or cfg.output_dir or "")
    if not (output_dir or cfg.output_dir):
        raise config_error("predict_no_output_dir", ("output_dir",))
    samples = load_samples(cfg)  # data mistakes fail before the model loads
    if engine is None:
        engine = ChatEngine(cfg)
    prompts, media = _render_prompts(cfg, engine, samples)
    text_only = [i for i in range(len(prompts)) if not media[i]]
    order = sorted(text_only, key=lambda i: -len(prompts[i]))
    size = cfg.per_device_eval_batch_size
    batches = [order[i : i + size] for i in range(0, len(order), size)]
    batches += [[i] for i in range(len(prompts)) if media[i]]  # with their media inputs: one at a time
    results: list[Any] = [None] * len(prompts)
    progress = _progress(len(prompts), cfg.disable_tqdm)
    start = time.perf_counter()
    for batch in batches:
        with_media = media[batch[0]] or None
        for i, response in zip(
            batch, engine.generate_batch([prompts[i] for i in batch], media=with_media, seed=cfg.seed)
        ):
            results[i] = response
        progress.update(len(batch))
    seconds = time.perf_counter() - start
    progress.close()

    out.mkdir(parents=True, exist_ok=True)
    thinks = has_thought_markers(engine.template)
    labels = [split_thought(s["label"])[1] if thinks else s["label"] for s in samples]  # the label's answer
    with open(out / PREDICTIONS, "w", encoding="utf-8") as f:
        for ids, response, label in zip(prompts, results, labels):
            row = {"prompt": engine.tokenizer.decode(ids), "prediction": response.text, "label": label}
            row["predict"] = response.text  # the key LLaMA-Factory users' scripts read
            if thinks:
                row["reasoning"] = response.reasoning
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    generated = sum(r.completion_tokens for r in results)
    scores = score_predictions([r.text for r in results], labels)
    metrics = {f"predict_{k}": v for k, v in scores.items()}
    metrics.update(
        predict_samples=len(samples),
        predict_runtime=round(seconds, 4),
        predict_samples_per_second=round(len(samples) / seconds, 3) if seconds else None,
        predict_generated_tokens=generated,
        predict_tokens_per_second=round(generated / seconds, 2) if seconds else None,
    )
    (out / RESULTS).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    print(
        f"predict: {len(samples)} samples in {seconds:.1f} s "
        f"({metrics['predict_tokens_per_second']} generated tokens/s) | "
        + " | ".join(f"{k} {v}" for k, v in scores.items())
        + f" -> {out / PREDICTIONS}"
    )
    return metrics


def _render_prompts(cfg: Config, engine, samples: list[dict[str, Any]]) -> tuple[list[list[int]], list[dict]]:
    """Every sample's prompt ids (text prompts over ``cutoff_len`` keep their last tokens) and media inputs."""
    prompts, media, truncated = [], [], 0
    for s in samples:
        if any(s["media"].values()):
            ids, inputs = render_sample(engine, s["messages"], s["system"], s["tools"], s["media"], s["where"])
            if len(ids) > cfg.cutoff_len:
                raise DataError(
                    Said("predict_media_too_long", where=s["where"], tokens=len(ids), cutoff_len=cfg.cutoff_len)
                )
        else:
            ids, inputs = engine.render(s["messages"], s["system"], s["tools"]), {}
            if len(ids) > cfg.cutoff_len:
                ids, truncated = ids[-cfg.cutoff_len :], truncated + 1
        prompts.append(ids)
        media.append(inputs)
    if truncated:
        print(
            f"predict: {truncated} prompt(s) longer than cutoff_len {cfg.cutoff_len} were cut to their last "
            f"{cfg.cutoff_len} tokens"
        )
    return prompts, media


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, disabled: bool):
    if disabled:
        return _NoProgress()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Predicting", unit="sample")
