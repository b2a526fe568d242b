"""``tunekit train`` seeds the model's random init (LoRA adapters, value head) right before the model loads.

Without it the init depended on what the ranks had drawn before (data preparation differs per rank), and ZeRO-3,
which keeps each rank's own shard of the init instead of broadcasting rank 0's, trained a mixture of two inits
(tests/distributed/test_distributed_stages.py's ZeRO-3 comparisons failed on a host where the
ranks' RNG states differed).
"""

from __future__ import annotations

from tunekit.config import load_config


def test_the_models_random_init_does_not_depend_on_what_data_preparation_drew(tiny_qwen, tmp_path, monkeypatch):
    """``train/run.build_model`` seeds right before the model loads: a data preparation that draws from
    torch's RNG (as one rank's may and another's not) leaves the LoRA init unchanged, so ZeRO-3's per-rank
    shards come from one init."""
    import torch

    from tests.helpers import alpaca_records, base_config, write_dataset
    from tunekit.data import pipeline
    from tunekit.plan.decide import decide_run
    from tunekit.train import run as steps
    from tunekit.train.machine import Machine

    write_dataset(tmp_path / "data", "toy", alpaca_records(4))
    prepare = pipeline.prepare_datasets
    inits = []
    for draws in (0, 5):

        def drawing(*args, draws=draws, **kwargs):
            torch.rand(draws)
            return prepare(*args, **kwargs)

        monkeypatch.setattr(steps, "prepare_datasets", drawing)  # where run.prepare_data looks it up
        cfg = load_config(
            None,
            base_config(tiny_qwen, tmp_path / "data", tmp_path / f"o{draws}", finetuning_type="lora", use_cpu=True),
        )
        prepared = steps.prepare_data(cfg)
        model = steps.build_model(cfg, decide_run(cfg, Machine.cpu(), prepared.longest_row), prepared)
        inits.append({n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n})
    assert inits[0] and inits[0].keys() == inits[1].keys()
    assert all(torch.equal(inits[0][n], inits[1][n]) for n in inits[0])
