"""LLaMA-Factory v1 dataset lists' ``size`` / ``weight`` read as tunekit's ``dataset_sampling``
(config/llamafactory_v1_data.py) and drawn as v1's ``adjust_data_index`` draws them (data/sampling.py): ``size``
draws that many records at random with replacement, then ``weight`` draws ``int(count x weight)`` at random with
replacement from those; the draw follows the run's seed, is recorded in tunekit_config.yaml and reported per dataset.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tunekit.config import build_config, load_config
from tunekit.errors import ConfigError

LIST = """\
first:
  path: data/a.json
  source: local
  converter: alpaca
  size: 8
  weight: 1.5
second:
  path: data/b.json
  source: local
  converter: alpaca
  weight: 0.5
"""
#: the draws of seed 42 (numpy's PCG64 stream seeded with [seed, crc32(path)]): 8 then int(8 x 1.5) = 12 of a.json's
#: 5 records, int(4 x 0.5) = 2 of b.json's 4
DRAWN_A = [1, 1, 3, 0, 0, 4, 3, 3, 3, 0, 2, 3]
DRAWN_B = [3, 2]
NOTE_A = (
    "dataset data/a.json: drew 12 samples from 5 records at random with replacement (dataset_sampling size 8, "
    "weight 1.5): 5 distinct records, 7 repeats, 0 records not drawn"
)
NOTE_B = (
    "dataset data/b.json: drew 2 samples from 4 records at random with replacement (dataset_sampling weight 0.5): "
    "2 distinct records, 0 repeats, 2 records not drawn"
)


@pytest.fixture
def v1_root(tmp_path, monkeypatch):
    """The current folder of a v1 run: data/a.json (5 alpaca records a0..a4), data/b.json (4: b0..b3), the list."""
    for var in ("WORLD_SIZE", "NPROC_PER_NODE", "NNODES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    for name, n in (("a", 5), ("b", 4)):
        records = [{"instruction": f"{name}{i}", "input": "", "output": f"{name.upper()}{i}"} for i in range(n)]
        (data / f"{name}.json").write_text(json.dumps(records), encoding="utf-8")
    (data / "list.yaml").write_text(LIST, encoding="utf-8")
    return tmp_path


def _v1(root, model="m", extra=""):
    path = root / "v1.yaml"
    path.write_text(f"model: {model}\ntrain_dataset: data/list.yaml\nmicro_batch_size: 1\n{extra}", encoding="utf-8")
    return path.name


def test_size_and_weight_map_to_dataset_sampling(v1_root):
    cfg = load_config(_v1(v1_root))
    assert cfg.dataset == "data/a.json,data/b.json"
    assert cfg.dataset_sampling == {"data/a.json": {"size": 8, "weight": 1.5}, "data/b.json": {"weight": 0.5}}


def test_the_mapping_is_recorded_in_tunekit_config_yaml(v1_root):
    """The written file names the v1 key, and read back as a tunekit config it draws the same."""
    from tunekit.config.loader import save_config

    cfg = load_config(_v1(v1_root))
    written = save_config(cfg, v1_root / "out").read_text(encoding="utf-8")
    assert (
        "# from LLaMA-Factory v1 `train_dataset: data/list.yaml` (data/a.json: size 8, weight 1.5; data/b.json: "
        "weight 0.5)\ndataset_sampling:\n  data/a.json:\n    size: 8\n    weight: 1.5\n"
        "  data/b.json:\n    weight: 0.5\n"
    ) in written
    again = load_config(str(v1_root / "out" / "tunekit_config.yaml"))
    assert (again.dataset_sampling, again.seed) == (cfg.dataset_sampling, cfg.seed)


def test_the_draws_are_pinned_under_the_seed():
    from tunekit.data.sampling import draw_indexes

    assert draw_indexes(5, {"size": 8, "weight": 1.5}, "data/a.json", 42) == DRAWN_A
    assert draw_indexes(4, {"weight": 0.5}, "data/b.json", 42) == DRAWN_B
    assert draw_indexes(5, {"size": 8, "weight": 1.5}, "data/a.json", 7) != DRAWN_A  # another seed, another draw
    assert draw_indexes(5, {"size": 8, "weight": 1.5}, "data/c.json", 42) != DRAWN_A  # each dataset its own stream


@pytest.mark.parametrize(
    "records, draw, count",
    [
        (5, {"size": 8}, 8),  # more than the records: repeats
        (100, {"size": 3}, 3),
        (10, {"weight": 0.25}, 2),  # int(10 x 0.25)
        (10, {"weight": 3}, 30),
        (7, {"size": 9, "weight": 0.5}, 4),  # weight applies to the drawn 9: int(4.5)
        (3, {"weight": 0.2}, 0),  # int(0.6): v1 draws nothing from this dataset
    ],
)
def test_counts_are_v1s(records, draw, count):
    """v1: ``random.choices(index, k=size)`` then ``random.choices(index, k=int(len(index) * weight))``."""
    from tunekit.data.sampling import draw_indexes

    picked = draw_indexes(records, draw, "d", 0)
    assert len(picked) == count and all(0 <= i < records for i in picked)


def test_weight_draws_from_the_sized_draw():
    """The weight's draw picks among the records the size drew, never one the size left out."""
    from tunekit.data.sampling import draw_indexes

    for seed in range(20):
        sized = set(draw_indexes(50, {"size": 5}, "d", seed))
        assert set(draw_indexes(50, {"size": 5, "weight": 4}, "d", seed)) <= sized


def test_training_rows_are_the_drawn_records_and_the_report_says_so(v1_root, tiny_qwen):
    from rich.console import Console

    from tunekit.data.pipeline import prepare_datasets
    from tunekit.data.report import print_reports
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(_v1(v1_root, tiny_qwen), ["seed=42"])
    data = prepare_datasets(cfg, load_tokenizer(cfg))
    tok = load_tokenizer(cfg)
    users = [re.search(r"user\n(\w+)<\|im_end\|>", tok.decode(row["input_ids"])).group(1) for row in data.train]
    assert users == [f"a{i}" for i in DRAWN_A] + [f"b{i}" for i in DRAWN_B]
    assert [(r.name, r.records, r.kept, r.sampled) for r in data.reports] == [
        ("data/a.json", 12, 12, NOTE_A),
        ("data/b.json", 2, 2, NOTE_B),
    ]
    console = Console(record=True, width=400)
    print_reports(data.reports, cfg.cutoff_len, console=console)
    assert f"  {NOTE_A}\n  {NOTE_B}\n" in console.export_text()


def test_predict_reads_the_drawn_records(v1_root):
    """``tunekit predict`` selects records with training's one function (data/sampling.select_records): the draw."""
    from tunekit.infer.predict import load_samples

    cfg = load_config(_v1(v1_root), ["seed=42"])
    users = [s["messages"][0]["content"] for s in load_samples(cfg)]
    assert users == [f"a{i}" for i in DRAWN_A] + [f"b{i}" for i in DRAWN_B]


def test_a_changed_seed_draws_and_tokenizes_again(v1_root, tiny_qwen):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(_v1(v1_root, tiny_qwen), ["seed=7"])
    data = prepare_datasets(cfg, load_tokenizer(cfg))
    assert data.reports[0].sampled.startswith("dataset data/a.json: drew 12 samples from 5 records")
    assert data.reports[0].sampled != NOTE_A


@pytest.mark.parametrize(
    "entry, why",
    [
        ("  size: 0\n", "size: 0 must be a whole number of samples, at least 1 (remove it to read every record once)"),
        (
            "  size: 2.5\n",
            "size: 2.5 must be a whole number of samples, at least 1 (remove it to read every record once)",
        ),
        ("  weight: -1\n", "weight: -1 must be a number above 0 (remove it to read every record once)"),
    ],
)
def test_bad_size_or_weight_refused(v1_root, entry, why):
    (v1_root / "data" / "list.yaml").write_text(
        "only:\n  path: data/a.json\n  source: local\n  converter: alpaca\n" + entry, encoding="utf-8"
    )
    with pytest.raises(ConfigError) as err:
        load_config(_v1(v1_root))
    assert str(err.value) == (
        f"LLaMA-Factory v1 dataset list `train_dataset: data/list.yaml`, entry 'only' (in v1.yaml): {why}."
    )


def test_one_file_twice_with_a_draw_refused(v1_root):
    (v1_root / "data" / "list.yaml").write_text(
        LIST + "again:\n  path: data/a.json\n  source: local\n  weight: 2\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError) as err:
        load_config(_v1(v1_root))
    assert str(err.value) == (
        "LLaMA-Factory v1 dataset list `train_dataset: data/list.yaml`, entry 'again' (in v1.yaml): path data/a.json "
        "is read by an earlier entry too; tunekit names a dataset by its file, so one file has one size / weight: "
        "merge the entries."
    )


def test_eval_list_draws_too(v1_root):
    (v1_root / "data" / "eval.yaml").write_text(
        "held:\n  path: data/b.json\n  source: local\n  converter: alpaca\n  size: 3\n", encoding="utf-8"
    )
    (v1_root / "data" / "list.yaml").write_text(LIST.split("second:", maxsplit=1)[0], encoding="utf-8")
    cfg = load_config(_v1(v1_root, extra="eval_dataset: data/eval.yaml\n"))
    assert (cfg.dataset, cfg.eval_dataset) == ("data/a.json", "data/b.json")
    assert cfg.dataset_sampling == {"data/a.json": {"size": 8, "weight": 1.5}, "data/b.json": {"size": 3}}


def test_dataset_sampling_naming_no_dataset_of_the_run_is_refused(v1_root, tiny_qwen):
    from tunekit.data.pipeline import prepare_datasets
    from tunekit.model.loader import load_tokenizer

    cfg = load_config(_v1(v1_root, tiny_qwen), ["dataset=data/a.json"])  # b.json's entry names no dataset now
    with pytest.raises(ConfigError) as err:
        prepare_datasets(cfg, load_tokenizer(cfg))
    assert str(err.value) == (
        "dataset_sampling names data/b.json, which is not a dataset of this run (dataset / eval_dataset: "
        "data/a.json); name each dataset as dataset or eval_dataset writes it, or remove its entry."
    )


@pytest.mark.parametrize(
    "value, why",
    [
        ({"a": {"siz": 3}}, "entry 'a' takes size and/or weight, got siz"),
        ({"a": {}}, "entry 'a' takes size and/or weight, got neither"),
        ({"a": {"size": 0}}, "entry 'a': size 0 is not a whole number of at least 1"),
        ({"a": {"weight": 0}}, "entry 'a': weight 0 is not above 0"),
    ],
)
def test_the_option_checks_its_entries(value, why):
    with pytest.raises(ConfigError) as err:
        build_config({"dataset_sampling": value})
    assert str(err.value) == (
        f"Option 'dataset_sampling' (config) got {value} (dict), expected Dict[str, dict[str, int | float]]: {why}."
    )


def test_written_yaml_round_trips_the_whole_numbers(v1_root):
    cfg = load_config(_v1(v1_root))
    dumped = yaml.safe_load(yaml.safe_dump(cfg.model_dump(mode="json")["dataset_sampling"]))
    assert dumped == {"data/a.json": {"size": 8, "weight": 1.5}, "data/b.json": {"weight": 0.5}}
    assert isinstance(dumped["data/a.json"]["size"], int)
