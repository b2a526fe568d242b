"""``tunekit verify`` for a vision-language or audio-language export: the processor, an image (or audio) prompt, and
the merged model against base + adapter on it.

Checks, in order (each a line of the report; verify.py runs the weight and loading checks before):

- ``processor_files``: the files ``tunekit export`` copied (``tunekit_export.json``: ``multimodal.processor_files``)
  are there, and at least ``preprocessor_config.json`` or ``processor_config.json`` (without one AutoProcessor has
  no image processor / feature extractor);
- ``processor``: ``AutoProcessor.from_pretrained(folder)`` loads. Where it cannot only because the family's video
  processor needs torchvision (Qwen2-VL, Qwen3-VL on a machine without it), that is said, and the image processor
  and tokenizer are used alone;
- ``media_prompt``: on one image (or audio) conversation and one text conversation, the ids of the processor's
  official rendering (``processor.apply_chat_template(..., tokenize=True)``) equal tunekit's (the family plugin
  loaded from the export, as training and ``tunekit chat`` render), and the media tensors are equal. Without
  AutoProcessor: the tokenizer's chat template text, each image as its single image token, equals tunekit's text
  with one token per image (the processor's own input before it expands the image tokens);
- ``generate``: the export generates greedily from the image;
- for a merged adapter, ``merged_logits``: over the prompt and the reference's greedy reply, the merged model's
  logits equal base + adapter (unmerged PEFT, fp32) within ``checks.LOGIT_TOLERANCE``; ``merged_generate``: the
  greedy token ids are equal. A different token is accepted only where the reference's two best logits are closer
  than twice the measured logit difference (a near tie that rounding may flip; the report says so).

The image is synthetic (96 x 64, a colour gradient) and the audio a 1.5 s two-tone signal, written to a temporary
folder: verification needs no data set.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ..config import load_config
from ..config.problems import Said
from ..config.schema import Config
from ..data.media_columns import PROCESSOR_FILES
from ..data.mm_plugins import FAMILIES, load_plugin
from ..data.mm_plugins.audio import read_audio
from ..data.pipeline import load_template
from ..data.processors.media import expand_messages
from .checks import LOGIT_TOLERANCE, reference_model
from .checks import problem as _problem
from .checks import skip as _skip
from .media import PROCESSOR_CORE

IMAGE_PROMPT, AUDIO_PROMPT = "Describe the picture.", "What do you hear?"
#: a one-turn text prompt: LLaVA's trained replies end with </s> where the llava-hf template writes a space, so a
#: history differs there by design (docs/multimodal.md); every prompt up to the assistant's turn is identical
TEXT_TURNS = [("user", "Tell me a joke.")]


def verify_media(
    path: Path, model, tokenizer, provenance: dict, adapters_cfg: Config | None, report: dict, max_new_tokens: int
) -> None:
    if not _check_files(path, provenance, report):
        return

    processor = _load_processor(path, report)
    with tempfile.TemporaryDirectory(prefix="tunekit-verify-") as tmp:
        if provenance.get("template") not in FAMILIES:  # a folder tunekit did not export: the processor's prompt alone
            prompt = _processor_prompt(processor, Path(tmp), report)
            if prompt is None:
                return
        else:
            try:
                prompt = _tunekit_prompt(path, tokenizer, provenance, Path(tmp))
            except Exception as exc:  # the family plugin cannot read the export: what `tunekit chat` on it would hit
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"  # the library's own words
                _problem(report, Said("verify_media_no_prompt", path=str(path), error=error))
                return
            _check_prompt(processor, tokenizer, prompt, provenance, report)
        inputs = prompt["inputs"]
        start = time.perf_counter()
        generated = _greedy(model, inputs, provenance, tokenizer, max_new_tokens)
        seconds = time.perf_counter() - start
        report["generated"] = tokenizer.decode(generated, skip_special_tokens=True)
        report["generated_tokens"] = len(generated)
        report["tokens_per_second"] = round(len(generated) / seconds, 1) if seconds > 0 else None
        report["checks"]["generate"] = f"{len(generated)} tokens from the {prompt['kind']} prompt in {seconds:.2f} s"
        if not generated:
            _problem(report, Said("verify_no_tokens"))
        if adapters_cfg is not None:
            compare_with_adapter(model, adapters_cfg, inputs, generated, provenance, tokenizer, report, max_new_tokens)


def _check_files(path: Path, provenance: dict, report: dict) -> bool:
    recorded = (provenance.get("multimodal") or {}).get("processor_files") or []
    missing: list[str] = [f for f in recorded if not (path / f).is_file()]
    if not any((path / f).is_file() for f in PROCESSOR_CORE) and not set(missing) & set(PROCESSOR_CORE):
        missing.append(Said("part_verify_either", one=PROCESSOR_CORE[0], other=PROCESSOR_CORE[1]))
    if missing:
        _problem(report, Said("verify_media_no_processor_files", path=str(path), absent_files=tuple(missing)))
        return False
    present = [f for f in PROCESSOR_FILES if (path / f).is_file()]
    report["checks"]["processor_files"] = ", ".join(present)
    return True


def _load_processor(path: Path, report: dict):
    """``AutoProcessor`` of the folder, or None where only torchvision is missing (said in the report)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(path)
    except ImportError as exc:
        if "torchvision" not in str(exc).lower():
            raise
        why = (
            next((line for line in str(exc).splitlines() if "torchvision" in line.lower()), str(exc))
            .split(". ")[0]
            .strip()
        )
        report["checks"]["processor"] = (
            f"AutoProcessor cannot load here ({why}); the image processor and tokenizer are used alone"
        )
        return None
    except (OSError, ValueError) as exc:
        _problem(report, Said("verify_media_processor_failed", path=str(path), error=str(exc).splitlines()[0][:300]))
        return None
    report["checks"]["processor"] = type(processor).__name__
    return processor


def _synthetic_image(folder: Path) -> Path:
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:64, 0:96]
    pixels = np.stack([x * 255 // 95, y * 255 // 63, (x + y) % 256], axis=-1).astype(np.uint8)
    out = folder / "verify.png"
    Image.fromarray(pixels, "RGB").save(out)
    return out


def _synthetic_audio(folder: Path, rate: int) -> Path:
    import wave

    import numpy as np

    t = np.arange(int(1.5 * rate)) / rate
    signal = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1320 * t)
    out = folder / "verify.wav"
    with wave.open(str(out), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((signal * 32767).astype("<i2").tobytes())
    return out


def _tunekit_prompt(path: Path, tokenizer, provenance: dict, tmp: Path) -> dict[str, Any]:
    """The image (audio) conversation rendered as training and ``tunekit chat`` render it, with its model inputs."""
    import torch

    options = {"model_name_or_path": str(path), "template": provenance.get("template")}
    cfg = load_config(None, options)
    template = load_template(cfg, tokenizer)
    plugin = load_plugin(cfg, cfg.template)
    audio = "images" not in plugin.MEDIA and "audios" in plugin.MEDIA
    media = _synthetic_audio(tmp, plugin.sampling_rate) if audio else _synthetic_image(tmp)
    tag, text = ("<audio>", AUDIO_PROMPT) if audio else ("<image>", IMAGE_PROMPT)
    images = [] if audio else [str(media)]
    audio_texts = plugin.audio_expansions([str(media)], "verify") if audio else []
    system, thinking = provenance.get("default_system") or None, provenance.get("enable_thinking", True)

    def render(messages, counts):
        expanded = expand_messages(messages, counts, plugin, (), audio_texts)
        return template.render_prompt(expanded, system, None, thinking)

    messages = [{"role": "user", "content": tag + text}]
    rendered = render(messages, plugin.image_token_counts(images, "verify"))
    ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    inputs.update(plugin.collate(images, inputs["input_ids"], **({"audios": [str(media)]} if audio else {})))
    turns = [{"role": r, "content": c} for r, c in TEXT_TURNS]
    text_ids = tokenizer(render(turns, []), add_special_tokens=False)["input_ids"]
    return {
        "kind": "audio" if audio else "image",
        "file": media,
        "text": text,
        "ids": ids,
        "inputs": inputs,
        "one_token_text": None if audio else render(messages, [1]),
        "text_ids": text_ids,
        "rate": plugin.sampling_rate if audio else None,
        "system": system,
        "thinking": thinking,
    }


def _processor_prompt(processor, tmp: Path, report: dict) -> dict[str, Any] | None:
    """Without a tunekit multimodal template recorded: the processor's official rendering is the prompt."""

    reason = "tunekit_export.json records no tunekit multimodal template to compare the processor's rendering with"
    if processor is None:
        for name in ("media_prompt", "generate"):
            _skip(report, name, reason + ", and AutoProcessor cannot load here")
        return None
    audio = (
        getattr(processor, "feature_extractor", None) is not None
        and getattr(processor, "image_processor", None) is None
    )
    rate = processor.feature_extractor.sampling_rate if audio else 16000
    prompt = {
        "kind": "audio" if audio else "image",
        "file": _synthetic_audio(tmp, rate) if audio else _synthetic_image(tmp),
        "text": AUDIO_PROMPT if audio else IMAGE_PROMPT,
        "rate": rate,
        "system": None,
    }
    prompt["inputs"] = dict(
        processor.apply_chat_template(
            _parts(prompt, True), add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
    )
    _skip(report, "media_prompt", reason)
    return prompt


def _parts(prompt: dict, with_data: bool) -> list[dict]:
    from PIL import Image

    if prompt["kind"] == "image":
        part = {"type": "image", **({"image": Image.open(prompt["file"]).convert("RGB")} if with_data else {})}
    else:
        part = {
            "type": "audio",
            **({"audio": read_audio(str(prompt["file"]), "verify", prompt["rate"])} if with_data else {}),
        }
    system = [{"role": "system", "content": [{"type": "text", "text": prompt["system"]}]}] if prompt["system"] else []
    return system + [{"role": "user", "content": [part, {"type": "text", "text": prompt["text"]}]}]


def _text_parts(prompt: dict) -> list[dict]:
    system = [("system", prompt["system"])] if prompt["system"] else []
    return [{"role": r, "content": [{"type": "text", "text": c}]} for r, c in system + TEXT_TURNS]


def _check_prompt(processor, tokenizer, prompt: dict, provenance: dict, report: dict) -> None:
    kwargs = {"add_generation_prompt": True, **({} if prompt["thinking"] else {"enable_thinking": False})}
    name = provenance.get("template")
    if processor is None:
        official = tokenizer.apply_chat_template(_parts(prompt, False), tokenize=False, **kwargs)
        if official == prompt["one_token_text"]:
            report["checks"]["media_prompt"] = (
                f"the chat template's text == tunekit '{name}' with one image token per "
                f"image (the processor's input before expansion)"
            )
        else:
            _skip(
                report,
                "media_prompt",
                f"AutoProcessor cannot load here and the chat template's text differs from "
                f"tunekit's before expansion ({official!r} vs {prompt['one_token_text']!r})",
            )
        return
    official = processor.apply_chat_template(
        _parts(prompt, True), tokenize=True, return_dict=True, return_tensors="pt", **kwargs
    )
    text = processor.apply_chat_template(
        _text_parts(prompt), tokenize=True, return_dict=True, return_tensors="pt", **kwargs
    )
    for label, want, got in (
        (Said("part_verify_media_conversation"), official["input_ids"][0].tolist(), prompt["ids"]),
        (Said("part_verify_text_conversation"), text["input_ids"][0].tolist(), prompt["text_ids"]),
    ):
        if want != got:
            i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            official_text, ours = repr(tokenizer.decode(want[i : i + 8])), repr(tokenizer.decode(got[i : i + 8]))
            said = Said(
                "verify_media_prompt_differs",
                conversation=label,
                template=name,
                token=i,
                official=official_text,
                ours=ours,
            )
            _problem(report, said)
            return
    import torch

    common = [k for k in official if k in prompt["inputs"] and k not in ("input_ids", "attention_mask")]
    unequal = [k for k in common if not torch.equal(official[k].to(prompt["inputs"][k].dtype), prompt["inputs"][k])]
    if unequal:
        media = Said("part_verify_image") if prompt["kind"] == "image" else Said("part_verify_audio")
        _problem(report, Said("verify_media_tensors_differ", tensor_names=tuple(unequal), media=media))
        return
    report["checks"]["media_prompt"] = (
        f"{type(processor).__name__}.apply_chat_template == tunekit '{name}' on an "
        f"{prompt['kind']} conversation ({len(prompt['ids'])} ids; {', '.join(common)} "
        f"equal) and a text conversation"
    )


def _on(model, inputs: dict) -> dict:
    """``inputs`` on the model's device, floating tensors in its dtype (pixel values, audio features)."""
    dtype, device = next(model.parameters()).dtype, next(model.parameters()).device
    return {
        k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device)) for k, v in inputs.items()
    }


def _greedy(model, inputs: dict, provenance: dict, tokenizer, max_new_tokens: int) -> list[int]:
    import torch

    stops = provenance.get("stop_token_ids") or None
    with torch.inference_mode():
        out = model.generate(
            **_on(model, inputs),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            min_new_tokens=1,
            eos_token_id=stops,
            pad_token_id=tokenizer.pad_token_id,
        )
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def _logits(model, inputs: dict, continuation: list[int]):
    """fp32 logits over the prompt followed by ``continuation`` (teacher-forced). Per-token inputs besides the ids (the
    token types of Qwen2-VL's M-RoPE, Gemma 3's image mask) are extended with 0: the continuation is text."""
    import torch

    n = inputs["input_ids"].shape[1]
    extra = torch.tensor([continuation], dtype=torch.long)
    full = {
        k: torch.cat([v, torch.zeros(1, extra.shape[1], dtype=v.dtype)], dim=1) if tuple(v.shape) == (1, n) else v
        for k, v in inputs.items()
    }
    full["input_ids"] = torch.cat([inputs["input_ids"], extra], dim=1)
    full["attention_mask"] = torch.ones_like(full["input_ids"])
    with torch.inference_mode():
        return model(**_on(model, full)).logits.float()


def compare_with_adapter(
    model, adapters_cfg: Config, inputs, generated, provenance, tokenizer, report, max_new_tokens
) -> None:
    """The merged export against base + adapter (unmerged) on the media prompt: logits and greedy ids."""

    exported_dtype = str(model.dtype).replace("torch.", "")
    reference = reference_model(adapters_cfg)
    wanted = _greedy(reference, inputs, provenance, tokenizer, max_new_tokens)
    merged, ref = _logits(model.float(), inputs, wanted), _logits(reference, inputs, wanted)
    with reference.disable_adapter():  # the base alone: an export that silently equals the base is caught
        base = _logits(reference, inputs, wanted)
    diff, effect = float((merged - ref).abs().max()), float((ref - base).abs().max())
    report["max_abs_logit_diff"], report["adapter_effect"] = diff, effect
    if effect > 0 and float((merged - base).abs().max()) == 0:
        _problem(report, Said("verify_not_merged"))
    bound = LOGIT_TOLERANCE.get(exported_dtype)
    media = Said("part_verify_image") if "pixel_values" in inputs else Said("part_verify_media")
    positions = int(merged.shape[1])
    detail = Said(
        "part_verify_media_logits", diff=diff, positions=positions, media=media, dtype=exported_dtype, effect=effect
    )
    if bound is not None and diff >= bound:
        _problem(report, Said("verify_merged_logits_above", detail=detail, bound=bound))
    report["checks"]["merged_logits"] = detail + (f" < {bound:g}" if bound is not None and diff < bound else "")
    report["merged_generated_ids"], report["adapter_generated_ids"] = generated, wanted
    _compare_greedy(generated, wanted, ref, inputs["input_ids"].shape[1], diff, report)


def _compare_greedy(generated: list[int], wanted: list[int], ref, prompt_len: int, diff: float, report: dict) -> None:
    if generated == wanted:
        report["checks"]["merged_generate"] = f"greedy ids equal base + adapter's: {wanted}"
        return
    k = next((i for i, (a, b) in enumerate(zip(generated, wanted)) if a != b), min(len(generated), len(wanted)))
    if k >= len(generated) or k >= len(wanted):  # one stopped earlier at a stop token that the other did not pick
        k = min(k, len(wanted) - 1)
    top2 = ref[0, prompt_len + k - 1].topk(2).values
    margin = float(top2[0] - top2[1])
    if margin < 2 * diff:
        report["checks"]["merged_generate"] = (
            f"greedy ids differ from token {k} ({generated} vs {wanted}), where the "
            f"two best logits are {margin:.2e} apart, under twice the logit "
            f"difference {diff:.2e}: a near tie"
        )
        return
    said = Said(
        "verify_media_greedy_differs", token=k, merged=str(generated), adapter=str(wanted), margin=margin, diff=diff
    )
    _problem(report, said)
