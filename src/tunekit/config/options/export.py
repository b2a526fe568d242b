"""Export: merge adapters, shard, quantize."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ..problems import Problem
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
        "LLaMA-Factory's export_quantization_bit means; needs the gptqmodel and optimum packages); bnb = "
        "bitsandbytes NF4 / LLM.int8 (data-free, runs on CPU). Unset: gptq when "
        "export_quantization_dataset is given, else bnb.",
    )
    export_verify: bool = Field(
        True, description="Check the exported folder with plain transformers at the end of export (tunekit verify)."
    )


def export_problems(cfg: Config) -> Iterator[Problem]:
    """The quantization method against its calibration data."""
    if cfg.export_quantization_method == "bnb" and cfg.export_quantization_dataset:
        yield Problem(
            "export_quantization_dataset is GPTQ's calibration data, but export_quantization_method is bnb "
            "(data-free, it would not be used): remove export_quantization_dataset, or set "
            "export_quantization_method: gptq.",
            ("export_quantization_dataset", "export_quantization_method"),
        )
