"""Qwen2-Audio (``Qwen2AudioForConditionalGeneration``), template ``qwen2_audio``.

``<audio>`` → ``Audio k: <|audio_bos|>`` + n × ``<|AUDIO|>`` + ``<|audio_eos|>\n``: the official chat template's
rendering of the k-th audio part of a conversation (``Qwen2AudioProcessor.default_chat_template``), with n from
``Qwen2AudioProcessor``'s rule on the feature extractor's mask: L = frames of the ``WhisperFeatureExtractor``
features, n = ((L - 1) // 2 + 1 - 2) // 2 + 1 (the encoder's stride-2 conv, then its stride-2 pooling).
LLaMA-Factory writes only ``<|audio_bos|>`` + n × ``<|AUDIO|>`` + ``<|audio_eos|>``; tunekit follows the chat
template, so training ids equal the inference rendering (tests/multimodal/test_audio.py).

Audio is decoded with PyAV and resampled to the feature extractor's ``sampling_rate`` (``audio_sampling_rate``, which
must equal it where set; ``mm_plugins.audio``); the feature extractor
pads every clip to its 30-second window (``padding="max_length"``, as the processor does).

Modules: audio tower ``model.audio_tower`` (what ``freeze_vision_tower`` freezes, LLaMA-Factory's keys), projector
``model.multi_modal_projector``, language model ``model.language_model`` + ``lm_head``.
"""

from __future__ import annotations

from typing import Any

from ...config.problems import Said
from ...config.schema import Config
from ...errors import DataError
from . import MediaPlugin, from_preprocessor_config, special_token_ids
from .audio import read_audio
from .settings import set_options

AUDIO, AUDIO_BOS, AUDIO_EOS = "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"


def audio_token_count(frames: int) -> int:
    """``Qwen2AudioProcessor``'s number of ``<|AUDIO|>`` tokens for ``frames`` feature frames."""
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


class Qwen2AudioPlugin(MediaPlugin):
    NAME = "qwen2_audio"
    TEMPLATES = ("qwen2_audio",)
    MODEL_TYPES = ("qwen2_audio",)
    VISION_TOWER = ("model.audio_tower",)
    PROJECTOR = ("model.multi_modal_projector",)
    LANGUAGE_MODEL = ("model.language_model", "lm_head")
    MEDIA = ("audios",)

    def __init__(self, feature_extractor, token_ids: dict[str, int], sampling_rate: int):
        self.feature_extractor = feature_extractor
        self.token_ids = token_ids
        self.sampling_rate = sampling_rate

    @classmethod
    def load(cls, cfg: Config, path: str) -> Qwen2AudioPlugin:
        from transformers import WhisperFeatureExtractor

        feature_extractor = from_preprocessor_config(
            WhisperFeatureExtractor, path, Said("part_mm_feature_extractor"), "Qwen2-Audio"
        )
        rate = set_options(cfg).get("audio_sampling_rate") or feature_extractor.sampling_rate  # unset: the extractor's
        if feature_extractor.sampling_rate != rate:
            raise DataError(Said("mm_audio_rate", rate=rate, path=path, own=feature_extractor.sampling_rate))
        ids = special_token_ids(path, (AUDIO, AUDIO_BOS, AUDIO_EOS), "Qwen2-Audio")
        return cls(feature_extractor, ids, rate)

    def features(self, paths: list[str], where: str = "") -> dict[str, Any]:
        """``input_features`` and ``feature_attention_mask`` of the audio files, as ``Qwen2AudioProcessor`` makes
        them."""
        audios = [read_audio(p, where or p, self.sampling_rate) for p in paths]
        out = self.feature_extractor(
            audios,
            sampling_rate=self.sampling_rate,
            return_attention_mask=True,
            padding="max_length",
            return_tensors="pt",
        )
        return {"input_features": out["input_features"], "feature_attention_mask": out["attention_mask"]}

    def audio_expansions(self, paths: list[str], where: str) -> list[str]:
        frames = self.features(paths, where)["feature_attention_mask"].sum(-1).tolist()
        return [
            f"Audio {k + 1}: {AUDIO_BOS}{AUDIO * audio_token_count(int(n))}{AUDIO_EOS}\n" for k, n in enumerate(frames)
        ]

    def image_token_counts(self, paths: list[str], where: str) -> list[int]:
        return []  # images are refused before (MEDIA)

    def expand(self, text: str, counts: list[int], start: int) -> tuple[str, int]:
        return text, start

    def media_token_ids(self) -> set[int]:
        return {self.token_ids[AUDIO]}

    def collate(self, paths: list[str], input_ids, audios: list[str] = ()) -> dict[str, Any]:
        """Model inputs of one batch: the features of every audio file, in order."""
        return self.features(list(audios)) if audios else {}


PLUGIN = Qwen2AudioPlugin
