"""Idefics3 and SmolVLM (``smolvlm``, ``idefics3``): each ``<image>`` becomes its tiles' token runs.

The image processor (``Idefics3ImageProcessorPil`` / ``SmolVLMImageProcessorPil``, transformers' PIL path) resizes
the longest edge to ``size["longest_edge"]`` and, with ``do_image_splitting``, cuts the image into
``max_image_size`` tiles (``rows`` x ``cols``) plus the whole image downscaled to one tile. What a placeholder
becomes is the processor's own ``replace_image_token`` (Idefics3) / ``get_image_prompt_string`` (SmolVLM):
per tile ``<fake_token_around_image><row_r_col_c>`` + ``image_seq_len`` x ``<image>``, a ``"\n"`` after each row,
then ``"\n<fake_token_around_image><global-img>"`` + ``image_seq_len`` x ``<image>`` + ``<fake_token_around_image>``
(an unsplit image: only the global part). ``image_seq_len`` (the folder's ``processor_config.json``) is
``(tile / patch)² / scale_factor²``: 64 for SmolVLM-256M/500M (512-pixel tiles), 81 for SmolVLM-2.2B, 169 for
Idefics3-8B. All of these tokens are media (never trained).

``image_token_counts`` returns, per image, its tile grid as ``rows * GRID + cols`` (the layout the block needs,
not a token count: ``rows * cols * (image_seq_len + 2) + image_seq_len + 3`` tokens, not counting its ``"\n"``).

Which processor: ``model_type idefics3`` (Idefics3-8B, SmolVLM-256M/500M/2.2B-Instruct) loads ``Idefics3Processor``
with ``AutoProcessor`` (no torchvision needed). ``model_type smolvlm`` (SmolVLM2) ships ``SmolVLMProcessor``,
which transformers 5.24 cannot build without torchvision (its ``video_processor`` must be a torchvision-backed
``BaseVideoProcessor``, as Qwen2-VL's), so the tokenizer and the PIL image processor are loaded directly and the
processor's module-level ``get_image_prompt_string`` writes each block (images only; SmolVLM2 videos are refused).

Modules (``Idefics3ForConditionalGeneration`` / ``SmolVLMForConditionalGeneration``): vision tower
``model.vision_model`` (SigLIP), projector ``model.connector`` (pixel shuffle + linear), language model
``model.text_model`` + ``lm_head``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...config.problems import Said
from ...config.schema import Config
from ...errors import DataError
from . import open_image
from .hf_processor import ProcessorPlugin, fit_pixels, pixel_limits

GRID = 1000  # image_token_counts' code: rows * GRID + cols
MARKERS = ("<fake_token_around_image>", "<global-img>")


class SmolVLMLayout:
    """SmolVLM2's processor, as far as training needs it: tokenizer, image processor and the block rule (picklable)."""

    image_token = "<image>"

    def __init__(self, tokenizer, image_processor, image_seq_len: int):
        self.tokenizer, self.image_processor, self.image_seq_len = tokenizer, image_processor, image_seq_len

    def replace_image_token(self, image_inputs: dict, image_idx: int) -> str:
        from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

        rows = [r for row in image_inputs["rows"] for r in row][image_idx]
        cols = [c for col in image_inputs["cols"] for c in col][image_idx]
        return get_image_prompt_string(
            rows,
            cols,
            self.image_seq_len,
            fake_token_around_image=MARKERS[0],
            image_token=self.image_token,
            global_image_token=MARKERS[1],
        )


class Idefics3Plugin(ProcessorPlugin):
    NAME = "idefics3"
    TEMPLATES = ("smolvlm", "idefics3")
    MODEL_TYPES = ("idefics3", "smolvlm")
    PROCESSOR = "Idefics3Processor"
    VISION_TOWER = ("model.vision_model",)
    PROJECTOR = ("model.connector",)
    LANGUAGE_MODEL = ("model.text_model", "lm_head")
    MEDIA = ("images",)
    MODEL_INPUTS = ("pixel_values", "pixel_attention_mask")

    @classmethod
    def fits(cls, template: str, text_type: str | None, chat_template: str | None) -> bool:
        """Whether ``template`` is the chat format of a folder with this chat template (a folder served without
        ``template``): Idefics3-8B-Llama3's starts with ``<|begin_of_text|>`` (``idefics3``), SmolVLM's otherwise."""
        idefics3 = bool(chat_template) and chat_template.lstrip().startswith("<|begin_of_text|>")
        return (template == "idefics3") == idefics3

    @classmethod
    def load(cls, cfg: Config, path: str) -> Idefics3Plugin:
        folder = Path(path)
        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
        if model_type != "smolvlm":
            return super().load(cfg, path)
        from transformers import AutoTokenizer
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

        proc_file = folder / "processor_config.json"
        if not proc_file.is_file() or not (folder / "preprocessor_config.json").is_file():
            raise DataError(Said("mm_smolvlm_files", path=path))
        seq_len = json.loads(proc_file.read_text(encoding="utf-8")).get(
            "image_seq_len", 169
        )  # SmolVLMProcessor's default
        layout = SmolVLMLayout(
            AutoTokenizer.from_pretrained(path), SmolVLMImageProcessorPil.from_pretrained(path), seq_len
        )
        plugin = cls(layout, *pixel_limits(cfg, path))
        if plugin.image_token_id in (None, layout.tokenizer.unk_token_id):
            raise DataError(Said("mm_no_image_token", path=path, token="<image>", family="SmolVLM"))
        return plugin

    def images(self, paths: list[str], where: str) -> dict[str, Any]:
        imgs = [fit_pixels(open_image(p, where), self.min_pixels, self.max_pixels) for p in paths]
        return self.processor.image_processor(images=imgs, return_tensors="pt", return_row_col_info=True)

    def image_token_counts(self, paths: list[str], where: str) -> list[int]:
        if not paths:
            return []
        inputs = self.images(paths, where)
        rows = [r for row in inputs["rows"] for r in row]
        cols = [c for col in inputs["cols"] for c in col]
        return [r * GRID + c for r, c in zip(rows, cols)]

    def image_block(self, n: int) -> str:
        rows, cols = divmod(n, GRID)
        return self.processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)

    def media_token_ids(self) -> set[int]:
        tok = self.processor.tokenizer
        grid = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
        ids = {tok.convert_tokens_to_ids(t) for t in (*MARKERS, *grid)}
        return {self.image_token_id} | {i for i in ids if i is not None and i != tok.unk_token_id}


PLUGIN = Idefics3Plugin
