"""Export: merge adapters, shard, quantize."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ..problems import Problem, problem
from .base import OptionGroup

if TYPE_CHECKING:  # annotations only: the schema combines this group
    from ..schema import Config


class ExportOptions(OptionGroup):
    GROUP = "export"
    TITLE = "Export"

    export_dir: str | None = Field(None, description="Folder for the exported model.")
    export_size: float = Field(5, gt=0, description="Largest safetensors shard, in GB.")
    export_device: Literal["cpu", "auto"] = Field("cpu", description="Device used to merge.")
    export_legacy_format: bool = Field(False, description="Write .bin (pickle) files instead of safetensors.")
    export_quantization_bit: Literal[4, 8] | None = Field(
        None, description="Quantize the exported model to 4 or 8 bits."
    )
    export_quantization_dataset: str | None = Field(
        None,
        description="Calibration data for GPTQ export (a dataset name from dataset_info.json or a file); it selects "
        "GPTQ when export_quantization_method is not set.",
    )
    export_quantization_nsamples: int = Field(128, ge=1, description="Calibration samples.")
    export_quantization_maxlen: int = Field(1024, ge=1, description="Calibration sample length in tokens.")
    export_hub_model_id: str | None = Field(None, description="Push the export to this hub repository.")
    export_quantization_method: Literal["bnb", "gptq"] | None = Field(
        None,
        description="Quantized export: gptq = GPTQ with export_quantization_dataset as calibration data (what "
        "LLaMA-Factory's export_quantization_bit means; llm-compressor, run in an environment tunekit creates once, "
        "writes the compressed-tensors format; loading it needs the compressed-tensors package); bnb = "
        "bitsandbytes NF4 / LLM.int8 (data-free, runs on CPU). Unset: gptq when "
        "export_quantization_dataset is given, else bnb.",
    )
    export_verify: bool = Field(
        True, description="Check the exported folder with plain transformers at the end of export (tunekit verify)."
    )
    export_format: Literal["safetensors", "gguf"] = Field(
        "safetensors",
        description="What export writes: safetensors = a Hugging Face folder; gguf = one GGUF file converted by "
        "llama.cpp's own converter (needs the gguf extra), with an Ollama Modelfile beside it, verified in llama.cpp.",
    )
    export_gguf_type: Literal["f32", "f16", "bf16", "q8_0", "q4_k_m"] | None = Field(
        None,
        description="GGUF tensor type (export_format: gguf; default f16): f32, f16, bf16, or q8_0 / q4_k_m "
        "quantized by llama.cpp.",
    )


def export_problems(cfg: Config) -> Iterator[Problem]:
    """The quantization method against its calibration data; the GGUF export's options (:func:`gguf_problems`)."""
    if cfg.export_quantization_method == "bnb" and cfg.export_quantization_dataset:
        yield problem("export_bnb_dataset", ("export_quantization_dataset", "export_quantization_method"))
    yield from gguf_problems(cfg)


def gguf_problems(cfg: Config) -> Iterator[Problem]:
    """A GGUF export is quantized by llama.cpp (export_gguf_type), never by the safetensors export's options."""
    if cfg.export_gguf_type and cfg.export_format != "gguf":
        yield problem("gguf_type_needs_gguf", ("export_gguf_type", "export_format"), type=cfg.export_gguf_type)
    if cfg.export_format != "gguf":
        return
    for name in (
        "export_quantization_bit",
        "export_quantization_method",
        "export_quantization_dataset",
        "export_legacy_format",
    ):
        if getattr(cfg, name):
            yield problem("gguf_safetensors_option", (name, "export_format"), name=name)
