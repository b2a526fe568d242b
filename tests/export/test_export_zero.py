"""A real DeepSpeed ZeRO-3 checkpoint (tunekit train under torchrun, CPU/gloo) -> zero-to-fp32 / export."""

from __future__ import annotations

import pytest

from tests.distributed_helpers import zero_checkpoint_run

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_zero3_checkpoint_consolidates_to_the_trained_weights(tiny_qwen, tmp_path):
    from safetensors.torch import load_file

    from tunekit.cli.main import main
    from tunekit.export.zero import zero_tag

    out = zero_checkpoint_run(tiny_qwen, tmp_path, "z3")
    checkpoint = out / "checkpoint-2"
    assert zero_tag(checkpoint) == "global_step2"

    assert main(["zero-to-fp32", str(checkpoint), str(tmp_path / "fp32")]) == 0
    consolidated, final = load_file(tmp_path / "fp32" / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(consolidated) == set(final)  # tied lm_head saved once, like transformers does
    assert max((consolidated[k] - final[k]).abs().max().item() for k in final) == 0.0

    export = tmp_path / "export"  # export detects the ZeRO folder by itself and verifies the result
    assert main(["export", f"model_name_or_path={checkpoint}", "template=qwen", f"export_dir={export}"]) == 0
    assert (export / "model.safetensors.index.json").is_file() and (export / "tunekit_export.json").is_file()
