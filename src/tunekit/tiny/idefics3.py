"""Tiny random-weight Idefics3 and SmolVLM models, built locally in a few seconds.

Like :mod:`tunekit.tiny.llava_gemma3`: the real transformers classes (``Idefics3ForConditionalGeneration``,
``SmolVLMForConditionalGeneration``) at tiny sizes, random weights from a fixed seed, the byte-level BPE of
:mod:`tunekit.tiny.tokenizer` carrying the family's special tokens (``<fake_token_around_image>``, ``<image>``,
``<global-img>``, ``<row_1_col_1>`` .. ``<row_6_col_6>``, ``<end_of_utterance>``, SmolLM2's ``<|im_start|>`` /
``<|im_end|>`` / ``<|endoftext|>``), the family's chat template, and its own processor saved with the folder
(``processor_config.json``) on transformers' PIL/numpy image processors (``Idefics3ImageProcessorPil``,
``SmolVLMImageProcessorPil``): ``AutoProcessor.from_pretrained(folder)`` gives ``Idefics3Processor`` for Idefics3;
SmolVLM's folder holds ``SmolVLMProcessor``'s files, which transformers 5.24 cannot build into a processor without
torchvision (the family plugin reads the tokenizer and image processor directly, ``data/mm_plugins/idefics3.py``).

Sizes: tiles of 56 x 56 pixels in 14-pixel patches (4 x 4 patches), pixel-shuffled by ``scale_factor`` 2 into
``image_seq_len`` = 16 / 2² = 4 image tokens per tile. The image processor resizes the longest edge to 112 and splits
the image into 56-pixel tiles (``do_image_splitting``, ``max_image_size``), plus the whole image at 56: a demo image
(300 x 168) becomes 2 x 2 tiles + the global one.

``--like smolvlm`` (also ``smolvlm2``) builds ``model_type smolvlm`` (SmolVLM2), ``--like idefics3`` (also
``smolvlm1``) ``model_type idefics3`` (Idefics3-8B and SmolVLM-256M/500M/2B-Instruct); both use SmolLM2's
``<|im_start|>`` template ``smolvlm`` (Idefics3-8B-Llama3 itself: template ``idefics3``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tunekit.errors import ModelError

from .multimodal import DEFAULT_SIZES, TinySizes, new_folder, random_model
from .names import VLM_FAMILIES
from .tokenizer import (
    DEFAULT_VOCAB_SIZE,
    TokenizerFamily,
    check_tokenizer_roundtrip,
    trained_tokenizer_json,
)

ROW_COL = tuple(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))
IDEFICS3_TOKENS = TokenizerFamily(
    name="idefics3",
    template="smolvlm",
    special=(
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<fake_token_around_image>",
        "<image>",
        "<global-img>",
        "<end_of_utterance>",
        *ROW_COL,
    ),
    bos="<|im_start|>",
    eos="<end_of_utterance>",
    pad="<|im_end|>",
    unk="<|endoftext|>",
    generation_eos=("<end_of_utterance>",),
)

TILE, PATCH, SCALE = 56, 14, 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE**2  # 4
LONGEST_EDGE = 2 * TILE

#: --like name -> model_type of the families built here (the names are declared once, in names.VLM_FAMILIES)
FAMILIES = {like: family for like, family in VLM_FAMILIES.items() if family in ("idefics3", "smolvlm")}
PROCESSORS = {"idefics3": "Idefics3Processor", "smolvlm": "SmolVLMProcessor"}


def chat_template() -> str:
    """The SmolVLM chat template transformers ships (``processing_smolvlm.DEFAULT_CHAT_TEMPLATE``, verbatim)."""
    from importlib import resources

    return resources.files("tunekit.data.templates").joinpath("official_smolvlm.jinja").read_text(encoding="utf-8")


def _tokenizer(sizes: TinySizes, template: str):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fam = IDEFICS3_TOKENS
    raw = Tokenizer.from_str(trained_tokenizer_json(fam, sizes.vocab_size or DEFAULT_VOCAB_SIZE))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=fam.bos,
        eos_token=fam.eos,
        pad_token=fam.pad,
        unk_token=fam.unk,
        add_bos_token=False,
        add_eos_token=False,
        model_max_length=sizes.max_position_embeddings,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = template
    return tokenizer


def _config(family: str, sizes: TinySizes, vocab: int, ids: dict[str, int]):
    from transformers import AutoConfig

    h, heads = sizes.hidden_size, sizes.num_heads
    text = dict(
        model_type="llama",
        hidden_size=h,
        intermediate_size=4 * h,
        num_hidden_layers=sizes.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=sizes.num_kv_heads,
        head_dim=h // heads,
        vocab_size=vocab,
        max_position_embeddings=sizes.max_position_embeddings,
        rms_norm_eps=1e-5,
        hidden_act="silu",
        initializer_range=0.02,
        tie_word_embeddings=False,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<end_of_utterance>"],
        pad_token_id=ids["<|im_end|>"],
    )
    vision = dict(
        model_type=f"{family}_vision",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=TILE,
        patch_size=PATCH,
        initializer_range=0.02,
    )
    return AutoConfig.for_model(
        family,
        text_config=text,
        vision_config=vision,
        scale_factor=SCALE,
        image_token_id=ids["<image>"],
        tie_word_embeddings=False,
        pad_token_id=ids["<|im_end|>"],
    )


def _save_processor(out: Path, family: str, tokenizer, template: str) -> None:
    """The family's processor files on transformers' PIL image processor (the real checkpoints' settings, scaled down).

    Idefics3: ``Idefics3Processor.save_pretrained``. SmolVLM: ``SmolVLMProcessor`` cannot be built without torchvision
    (transformers 5.24), so its files are written as SmolVLM2's folders hold them: ``preprocessor_config.json`` (the
    image processor), ``processor_config.json`` (``processor_class``, ``image_seq_len``), the tokenizer and
    template."""
    image = dict(size={"longest_edge": LONGEST_EDGE}, max_image_size={"longest_edge": TILE}, do_image_splitting=True)
    if family == "idefics3":
        from transformers import Idefics3Processor
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

        Idefics3Processor(
            image_processor=Idefics3ImageProcessorPil(**image),
            tokenizer=tokenizer,
            image_seq_len=IMAGE_SEQ_LEN,
            chat_template=template,
        ).save_pretrained(out)
        return
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    SmolVLMImageProcessorPil(**image).save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "processor_config.json").write_text(
        json.dumps({"image_seq_len": IMAGE_SEQ_LEN, "processor_class": "SmolVLMProcessor"}, indent=2) + "\n"
    )


def build_tiny_idefics3(
    out_dir: str | os.PathLike, like: str = "smolvlm", seed: int = 0, sizes: TinySizes = DEFAULT_SIZES
) -> Path:
    """Write a tiny random Idefics3 / SmolVLM (weights, tokenizer, chat template, processor) into ``out_dir``."""
    from transformers import AutoModelForImageTextToText

    family = FAMILIES[like.strip().lower()]
    template = chat_template()
    fam = IDEFICS3_TOKENS
    out, tokenizer, model_vocab = new_folder(out_dir, fam, template, sizes, tokenizer=_tokenizer(sizes, template))
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in fam.special}
    model = random_model(
        AutoModelForImageTextToText,
        _config(family, sizes, model_vocab, ids),
        seed,
        fam,
        ids,
        bos_token_id=ids[fam.bos],
    )
    model.save_pretrained(out)
    _save_processor(out, family, tokenizer, template)
    check_tokenizer_roundtrip(out, tokenizer)
    _check_processor(out, family)
    return out


def _check_processor(out: Path, family: str) -> None:
    """The saved folder must reload as the family's processor (SmolVLM: tokenizer + image processor) with the model's
    image token."""
    from transformers import AutoProcessor, AutoTokenizer

    if family == "idefics3":
        processor = AutoProcessor.from_pretrained(out)
        name, tokenizer = type(processor).__name__, processor.tokenizer
    else:
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

        SmolVLMImageProcessorPil.from_pretrained(out)
        name = json.loads((out / "processor_config.json").read_text(encoding="utf-8"))["processor_class"]
        tokenizer = AutoTokenizer.from_pretrained(out)
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    got = tokenizer.convert_tokens_to_ids("<image>")
    if name != PROCESSORS[family] or got != cfg["image_token_id"]:
        raise ModelError(
            f"tiny-model: {out} reloads as {name} with <image> = {got}, expected {PROCESSORS[family]} with "
            f"the model's image_token_id {cfg['image_token_id']} (tunekit.tiny.idefics3 needs fixing)."
        )
