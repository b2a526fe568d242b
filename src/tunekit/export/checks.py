"""What verify.py and verify_media.py share: the report's problem/skip entries, the logit bound, the reference
model."""

from __future__ import annotations

from ..config.schema import Config
from ..data.pipeline import load_template
from ..model.loader import load_model, load_tokenizer
from ..model.pickles import check_adapter_folder

#: enforced bound on the merged-vs-adapter logit difference, per export dtype (fp32 is the contract)
LOGIT_TOLERANCE = {"float32": 1e-4}


def problem(report: dict, text: str) -> None:
    report["ok"] = False
    report["problems"].append(text)


def skip(report: dict, name: str, reason: str) -> None:
    """A check that could not run: listed as ``skipped: reason``, never counted as passed."""
    report.setdefault("skipped", {})[name] = reason
    report["checks"][name] = f"skipped: {reason}"


def reference_model(base_cfg: Config):
    """Base + adapters in fp32 with the last adapter left unmerged (PEFT computes W x + B A x on the fly)."""
    from peft import PeftModel

    tokenizer = load_tokenizer(base_cfg)
    if base_cfg.template:
        load_template(base_cfg, tokenizer)  # same tokenizer fixes (added tokens) as the export
    model = load_model(
        base_cfg.model_copy(update={"adapter_name_or_path": None, "dtype": "float32"}), tokenizer, is_trainable=False
    )
    adapters = base_cfg.adapter_paths
    for i, adapter in enumerate(adapters):
        check_adapter_folder(adapter)  # a crafted adapter_model.bin: a one-line error naming it, before PEFT loads it
        model = PeftModel.from_pretrained(model, adapter)
        if i < len(adapters) - 1:
            model = model.merge_and_unload()
    return model.eval()
