"""tokenized_path: saved rows reused only by the config they were made for, multimodal data included.

A reload must give the run exactly what tokenizing again gives (rows, template, media plugin, so the same batch and
the same loss), and a folder tokenized for another stage / template / tokenizer / cutoff_len / masking / packing /
media setting / dataset is an error naming the key, both values and the fix, never used silently.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import alpaca_records, base_config, train_rows, write_dataset

FIX = (
    "set overwrite_cache: true to tokenize again (it replaces the saved data), or point tokenized_path to another "
    "folder"
)
SMALL = 28 * 28 * 16  # image_max_pixels: the demo's 1.jpg becomes 10 image tokens (as in test_multimodal.py)


def _cfg(model: Path, data_dir: Path, out: Path, **opts):
    from tunekit.config import load_config

    return load_config(None, base_config(model, data_dir, out, **opts))


def _prepare(cfg, stage=None):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    tokenizer = load_tokenizer(cfg)
    return prepare_datasets(cfg, tokenizer, stage or cfg.stage), tokenizer


def _rows(ds) -> list[dict]:
    return [dict(r) for r in ds]


def _from_folder(ds, folder: Path) -> bool:
    """Whether ``ds`` is memory-mapped from ``folder`` (loaded from tokenized_path, not tokenized again)."""
    return all(Path(f["filename"]).is_relative_to(folder) for f in ds.cache_files) and bool(ds.cache_files)


@pytest.fixture(scope="module")
def text_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("tokenized-text") / "data"
    write_dataset(data, "toy", alpaca_records(24))
    write_dataset(data, "other", alpaca_records(8, seed=1))
    return data


@pytest.fixture(scope="module")
def saved(tiny_qwen, text_data, tmp_path_factory) -> Path:
    """A tokenized_path written by a text sft config (the base of the mismatch tests)."""
    folder = tmp_path_factory.mktemp("tokenized-saved") / "tok"
    _prepare(_cfg(tiny_qwen, text_data, folder.parent / "out", tokenized_path=str(folder), val_size=0.25))
    return folder


# --- round trips -----------------------------------------------------------------------------------------------


def test_text_sft_round_trip_gives_the_same_rows_template_and_first_loss(tiny_qwen, text_data, tmp_path):
    from tunekit.flow import run_train

    folder = tmp_path / "tok"
    fresh, _ = _prepare(_cfg(tiny_qwen, text_data, tmp_path / "o0", val_size=0.25))
    runs = {}
    for name in ("save", "load"):
        cfg = _cfg(tiny_qwen, text_data, tmp_path / name, tokenized_path=str(folder), val_size=0.25, max_steps=1)
        data, _ = _prepare(cfg)
        assert _from_folder(data.train, folder) == (name == "load")
        assert _rows(data.train) == _rows(fresh.train) and _rows(data.eval) == _rows(fresh.eval)
        assert data.template is not None and data.template.name == fresh.template.name
        run_train(cfg)
        saved_tokenizer = [(tmp_path / name / f).read_text() for f in ("chat_template.jinja", "tokenizer_config.json")]
        runs[name] = ([r["loss"] for r in train_rows(tmp_path / name)], saved_tokenizer)
    # the same rows, model, seed and operations in one process: the same float32 result bit for bit
    assert runs["load"] == runs["save"] and len(runs["save"][0]) == 1


@pytest.fixture(scope="module")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    from tunekit.tiny.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-qwen2-vl") / "model", like="qwen2-vl", seed=0)


def _vl_cfg(model: Path, data_dir: Path, out: Path, **opts):
    return _cfg(
        model, data_dir, out, template="qwen2_vl", dataset="mllm_demo", cutoff_len=1024, image_max_pixels=SMALL, **opts
    )


def _batch(data, tokenizer):
    from tunekit.data.collator import MultimodalCollator

    assert data.mm is not None, "no media plugin: the collator would give the model no images"
    return MultimodalCollator(pad_token_id=tokenizer.pad_token_id, mm=data.mm)([data.train[i] for i in range(3)])


def test_multimodal_round_trip_gives_the_same_batch_as_fresh(tiny_qwen2_vl, demo_dir, tmp_path):
    import torch

    folder = tmp_path / "tok"
    fresh, tok = _prepare(_vl_cfg(tiny_qwen2_vl, demo_dir, tmp_path / "out"))
    want = _batch(fresh, tok)
    assert set(want) >= {"input_ids", "labels", "pixel_values", "image_grid_thw"}
    for name in ("save", "load"):
        data, tok = _prepare(_vl_cfg(tiny_qwen2_vl, demo_dir, tmp_path / "out", tokenized_path=str(folder)))
        assert _from_folder(data.train, folder) == (name == "load")
        got = _batch(data, tok)
        assert set(got) == set(want)
        for key in want:
            assert torch.equal(got[key], want[key]), key


def test_a_missing_media_file_is_named_on_load(tiny_qwen2_vl, demo_dir, tmp_path):
    from tunekit.errors import DataError

    data_dir = tmp_path / "data"
    shutil.copytree(demo_dir / "mllm_demo_data", data_dir / "mllm_demo_data")
    shutil.copy(demo_dir / "mllm_demo.json", data_dir / "mllm_demo.json")
    (data_dir / "dataset_info.json").write_text(
        json.dumps({"mllm_demo": json.loads((demo_dir / "dataset_info.json").read_text())["mllm_demo"]})
    )
    folder = tmp_path / "tok"
    cfg = _vl_cfg(tiny_qwen2_vl, data_dir, tmp_path / "out", tokenized_path=str(folder))
    _prepare(cfg)
    gone = (data_dir / "mllm_demo_data" / "1.jpg").resolve()
    gone.unlink()
    with pytest.raises(DataError) as exc:
        _prepare(cfg)
    assert str(exc.value) == (
        f"tokenized_path {folder}: its rows use the media file {gone}, which is missing. Put the "
        f"file back (the rows hold absolute paths), or {FIX}."
    )


# --- a folder made for another config ----------------------------------------------------------------------------


def _swapped_tokenizer(model: Path, out: Path) -> Path:
    """``model`` with two vocabulary entries' ids swapped: the same vocabulary size, another tokenizer."""
    shutil.copytree(model, out)
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    (a, ia), (b, ib) = [(t, vocab[t]) for t in ("a", "b")]
    vocab[a], vocab[b] = ib, ia
    (out / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return out


MISMATCHES = [  # (config change, the key named, saved value, this config's value)
    ({"cutoff_len": 32}, "cutoff_len", 64, 32),
    ({"stage": "dpo"}, "stage", "sft", "dpo"),
    ({"template": "default"}, "template", "qwen", "default"),
    ({"train_on_prompt": True}, "train_on_prompt", False, True),
    ({"mask_history": True}, "mask_history", False, True),
    ({"packing": True}, "packing", "off", "packed"),
    ({"dataset": "toy,other"}, "dataset", ["toy"], ["toy", "other"]),
    ({"val_size": 0.5}, "val_size", 0.25, 0.5),
    ({"seed": 1}, "split_seed", 0, 1),
    ({"max_samples": 4}, "max_samples", None, 4),
]


@pytest.mark.parametrize("change, key, old, new", MISMATCHES, ids=[m[1] for m in MISMATCHES])
def test_each_mismatch_names_the_folder_key_both_values_and_the_fix(
    saved, tiny_qwen, text_data, tmp_path, change, key, old, new
):
    from tunekit.errors import DataError

    opts = {"val_size": 0.25, **change}
    stage = opts.pop("stage", None)
    cfg = _cfg(tiny_qwen, text_data, tmp_path / "out", tokenized_path=str(saved), **opts)
    with pytest.raises(DataError) as exc:
        _prepare(cfg, stage)
    assert str(exc.value) == (
        f"tokenized_path {saved} was tokenized with {key} = {old!r}, but this config gives {key} = "
        f"{new!r}: its rows do not fit this run. {FIX[0].upper()}{FIX[1:]}."
    )


def test_another_tokenizer_of_the_same_size_is_a_mismatch(saved, tiny_qwen, text_data, tmp_path):
    from tunekit.errors import DataError

    other = _swapped_tokenizer(tiny_qwen, tmp_path / "model")
    with pytest.raises(
        DataError,
        match=r"was tokenized with tokenizer = '[0-9a-f]{16}', but this config gives "
        r"tokenizer = '[0-9a-f]{16}'",
    ):
        _prepare(_cfg(other, text_data, tmp_path / "out", tokenized_path=str(saved), val_size=0.25))


def test_media_settings_are_checked(tiny_qwen2_vl, demo_dir, tmp_path):
    from tunekit.errors import DataError

    folder = tmp_path / "tok"
    _prepare(_vl_cfg(tiny_qwen2_vl, demo_dir, tmp_path / "out", tokenized_path=str(folder)))
    with pytest.raises(
        DataError,
        match=r"with media_options = \{.*'image_max_pixels': 12544.*\}, but this config gives "
        r"media_options = \{.*'image_max_pixels': 50176.*\}",
    ):
        _prepare(
            _cfg(
                tiny_qwen2_vl,
                demo_dir,
                tmp_path / "out",
                template="qwen2_vl",
                dataset="mllm_demo",
                cutoff_len=1024,
                image_max_pixels=4 * SMALL,
                tokenized_path=str(folder),
            )
        )


def test_the_same_config_without_dataset_loads_the_folder(saved, tiny_qwen, text_data, tmp_path):
    cfg = _cfg(tiny_qwen, text_data, tmp_path / "out", tokenized_path=str(saved), val_size=0.25, dataset=None)
    data, _ = _prepare(cfg)
    assert _from_folder(data.train, saved) and len(data.train) + len(data.eval) == 24


def test_an_older_folder_without_the_keys_is_refused(saved, tiny_qwen, text_data, tmp_path):
    from tunekit.errors import DataError

    old = tmp_path / "old"
    shutil.copytree(saved, old)
    meta = json.loads((old / "tunekit_tokenized.json").read_text())
    (old / "tunekit_tokenized.json").write_text(json.dumps({"reports": meta["reports"]}))  # what tunekit wrote before
    with pytest.raises(DataError) as exc:
        _prepare(_cfg(tiny_qwen, text_data, tmp_path / "out", tokenized_path=str(old), val_size=0.25))
    assert str(exc.value) == (
        f"tokenized_path {old} was saved by an older tunekit that did not record what the data was "
        f"tokenized with (stage, template, tokenizer, cutoff_len, ...), so it cannot be checked "
        f"against this config: {FIX}."
    )


def test_a_llamafactory_folder_is_neither_read_nor_overwritten(tiny_qwen, text_data, tmp_path):
    from tunekit.errors import DataError

    folder = tmp_path / "lf"
    (folder / "train").mkdir(parents=True)
    (folder / "dataset_dict.json").write_text('{"splits": ["train"]}')
    with pytest.raises(DataError, match="holds a saved dataset without tunekit_tokenized.json"):
        _prepare(_cfg(tiny_qwen, text_data, tmp_path / "out", tokenized_path=str(folder)))
    assert sorted(p.name for p in folder.iterdir()) == ["dataset_dict.json", "train"]


def test_overwrite_cache_tokenizes_again_and_replaces_the_folder(saved, tiny_qwen, text_data, tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(saved, folder)  # train + eval (val_size 0.25), cutoff_len 64
    cfg = _cfg(tiny_qwen, text_data, tmp_path / "out", tokenized_path=str(folder), cutoff_len=16, overwrite_cache=True)
    data, _ = _prepare(cfg)
    assert not _from_folder(data.train, folder) and len(data.train) == 24 and data.eval is None
    assert max(len(r["input_ids"]) for r in data.train) <= 16
    assert not (folder / "eval").exists()  # the old split is gone, not reloaded with the new train rows
    again, _ = _prepare(cfg.model_copy(update={"overwrite_cache": False}))
    assert _from_folder(again.train, folder) and _rows(again.train) == _rows(data.train) and again.eval is None
