"""``tunekit plan CONFIG.yaml [key=value ...] [--gpu NAME | --gpu-memory GiB] [--gpus N] [--nodes N] ...``."""

from __future__ import annotations

import json
import sys

from tunekit.config import load_config
from tunekit.config.problems import Said
from tunekit.errors import ConfigError
from tunekit.plan import make_plan
from tunekit.plan.report import print_plan

HELP = """usage: tunekit plan CONFIG.yaml [key=value ...] [--gpu NAME | --gpu-memory GiB] [--gpus N] [--nodes N]
                    [--num-samples N] [--seq-len S] [--model-config NAME|PATH] [--auto-fit] [--json]
                    [--images N] [--image-size WxH] [--videos N] [--video-seconds S]

Know before you train: steps (exactly as tunekit train counts them), peak memory per device by
component, FLOPs and time, and whether it fits. Reads config.json only, never the weights.

  --gpu NAME           a GPU from the built-in table (H100-SXM, A100-80GB, RTX-4090, ...)
  --gpu-memory GiB     or just its memory
  --gpus N             GPUs per node (data-parallel world size = gpus x nodes)
  --nodes N            nodes
  --num-samples N      plan for N samples (data not on disk, or to override the count)
  --seq-len S          tokens per sample (default: the measured lengths, else cutoff_len)
  --model-config X     built-in architecture (qwen2.5-7b, llama-3.1-8b, ...) or a config.json / model folder
  --auto-fit           choose batch size, accumulation, checkpointing, Liger and ZeRO to fit the GPU
  --json               print one JSON object

Vision-language models (config.json with a vision_config): the vision tower and projector are counted
(weights; gradients and optimizer states of what freeze_vision_tower / freeze_multi_modal_projector /
lora_target train; their activations for the patches of a micro-batch). Media per sample: the measured
data, else these assumptions (image tokens from image_min_pixels .. image_max_pixels):
  --images N           images per sample (default 1)
  --image-size WxH     their size in pixels (default: a square of image_max_pixels)
  --videos N           videos per sample (default 0), square frames at video_max_pixels
  --video-seconds S    their length: video_fps frames a second up to video_maxlen (default video_maxlen frames)
"""


def image_size(text: str) -> tuple[int, int]:
    """``WxH`` -> ``(height, width)``."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or not int(w) or not int(h):
        raise ValueError(text)
    return int(h), int(w)


image_size.__name__ = "size WxH (e.g. 1024x1024)"
VALUE_FLAGS = {
    "--gpu": str,
    "--gpu-memory": float,
    "--gpus": int,
    "--nodes": int,
    "--num-samples": int,
    "--seq-len": int,
    "--model-config": str,
    "--images": int,
    "--image-size": image_size,
    "--videos": int,
    "--video-seconds": float,
}
BOOL_FLAGS = ("--auto-fit", "--json")
DEST = {"--gpu-memory": "gpu_memory_gib"}


def parse(argv: list[str]) -> tuple[str | None, list[str], dict]:
    opts: dict = {"auto_fit": False, "json": False}
    rest: list[str] = []
    path = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, _, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if key in VALUE_FLAGS:
            if inline:
                raw = inline
            elif i + 1 < len(argv):
                i += 1
                raw = argv[i]
            else:
                raise ConfigError(Said("cli_flag_needs_value", flag=key))
            try:
                opts[DEST.get(key, key[2:].replace("-", "_"))] = VALUE_FLAGS[key](raw)
            except ValueError:
                kind = {int: Said("part_a_whole_number"), float: Said("part_a_number")}.get(VALUE_FLAGS[key])
                kind = kind or VALUE_FLAGS[key].__name__
                raise ConfigError(Said("cli_flag_expects", flag=key, kind=kind, value=repr(raw))) from None
        elif key in BOOL_FLAGS:
            opts[key[2:].replace("-", "_")] = True
        elif path is None and not rest and not arg.startswith("-") and "=" not in arg:
            path = arg
        else:
            rest.append(arg)
        i += 1
    return path, rest, opts


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(HELP)
        return 0
    path, rest, opts = parse(argv)
    cfg = load_config(path, rest)
    as_json = opts.pop("json")
    plan = make_plan(cfg, **opts)
    if as_json:
        sys.stdout.write(json.dumps(plan.to_json(), indent=2, default=str) + "\n")
    else:
        print_plan(plan)
    return 0
