"""Gemma 3 (``gemma3``): ``<image>`` → ``"\n\n<start_of_image>"`` + n × ``<image_soft_token>``
+ ``"<end_of_image>\n\n"``.

That is ``Gemma3Processor.full_image_sequence`` (what ``replace_image_token`` writes for an image in place of
the official template's ``<start_of_image>``), n = its ``image_seq_length`` = the model's ``mm_tokens_per_image``
(256 for the real models). Pan-and-scan (extra crops per image) is off, as in ``Gemma3Processor``'s defaults;
a processor configured with ``do_pan_and_scan: true`` is refused by name.

The official template trims every text part of a message (``item['text'] | trim``, and a plain string
message whole); here the text pieces between placeholders are trimmed (every message of a multimodal dataset
passes through :meth:`expand`), so the ``"\n\n"`` around each image survive as at
inference (the ``gemma3`` template therefore does not trim whole user messages, see docs/data.md).

Batches carry ``token_type_ids`` (1 on image soft tokens), which Gemma 3 uses for bidirectional attention
within each image, as the processor returns them.

Modules (transformers 5 ``Gemma3ForConditionalGeneration``): vision tower ``model.vision_tower`` (SigLIP),
projector ``model.multi_modal_projector``, language model ``model.language_model`` (the LM head is tied to
its embeddings, so it has no parameter of its own).
"""

from __future__ import annotations

from typing import Any

from ...config.problems import Said
from ...errors import DataError
from .hf_processor import ProcessorPlugin


class Gemma3Plugin(ProcessorPlugin):
    NAME = "gemma3"
    TEMPLATES = ("gemma3",)
    MODEL_TYPES = ("gemma3",)
    PROCESSOR = "Gemma3Processor"
    VISION_TOWER = ("model.vision_tower",)
    PROJECTOR = ("model.multi_modal_projector",)
    LANGUAGE_MODEL = ("model.language_model",)
    MEDIA = ("images",)

    @staticmethod
    def media_token(processor) -> str:
        return processor.tokenizer.image_token  # <image_soft_token> (processor.image_token is <start_of_image>)

    def check(self, path: str) -> None:
        if getattr(self.processor.image_processor, "do_pan_and_scan", False):
            raise DataError(Said("mm_pan_and_scan", path=path))

    def image_block(self, n: int) -> str:
        tok = self.processor.tokenizer
        return f"\n\n{tok.boi_token}{self.image_token * n}{tok.eoi_token}\n\n"

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        pieces = text.split("<image>")
        out = [pieces[0].strip()]
        for k, rest in enumerate(pieces[1:]):
            out.append(self.image_block(counts[start + k]) + rest.strip())
        return "".join(out), start + len(pieces) - 1

    def media_token_ids(self) -> set[int]:
        tok = self.processor.tokenizer
        return {self.image_token_id, tok.boi_token_id, tok.convert_tokens_to_ids(tok.eoi_token)}

    def collate(self, paths: list[str], input_ids) -> dict[str, Any]:
        out = super().collate(paths, input_ids)
        out["token_type_ids"] = (input_ids == self.image_token_id).long()
        return out


PLUGIN = Gemma3Plugin
