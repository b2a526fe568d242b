"""The small repeated concepts each have one home, and every user imports it: IGNORE_INDEX, comma-separated
option lists, boolean environment switches, NNODES, the media columns and processor files, and the stop tokens
(PPO/GRPO rollouts stop on chat's and predict's tokens, the generation config's eos_token_id included)."""

from __future__ import annotations

import ast
import json
import shutil

import pytest

from tests.helpers import ROOT

SRC = ROOT / "src" / "tunekit"


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def _assigned(name: str) -> list[str]:
    """Modules that bind ``name`` at top level (an import does not count)."""
    found = []
    for path, tree in _modules():
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(str(path.relative_to(SRC)))
    return found


def test_stop_tokens_rollouts_stop_where_chat_does(tiny_qwen, tmp_path):
    from tunekit.config import load_config
    from tunekit.data.templates import get_template
    from tunekit.infer.engine import ChatEngine
    from tunekit.model.loader import load_model, load_tokenizer
    from tunekit.train.stages.rollout import rollout_stop_ids
    from tunekit.train.stages.value_head import ValueHeadModel

    folder = tmp_path / "model"
    shutil.copytree(tiny_qwen, folder)
    gen_file = folder / "generation_config.json"
    gen = json.loads(gen_file.read_text(encoding="utf-8"))
    tokenizer_ids = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    extra = tokenizer_ids["a"]  # an ordinary token the checkpoint declares an end token
    gen["eos_token_id"] = (
        [*gen["eos_token_id"], extra] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"], extra]
    )
    gen_file.write_text(json.dumps(gen), encoding="utf-8")

    cfg = load_config(None, {"model_name_or_path": str(folder), "template": "qwen"})
    chat = ChatEngine(cfg).stop_ids
    tokenizer = load_tokenizer(cfg)
    vocab = tokenizer.get_vocab()
    assert chat == [vocab["<|im_end|>"], vocab["<|endoftext|>"], extra]
    model = load_model(cfg, tokenizer, is_trainable=False)
    template = get_template("qwen")
    assert rollout_stop_ids(model, tokenizer, template) == chat  # grpo's policy
    assert rollout_stop_ids(ValueHeadModel(model), tokenizer, template) == chat  # ppo's policy + value head


def test_stop_tokens_have_one_home():
    from tunekit.model.stops import stop_token_ids

    class Tok:
        eos_token_id = 7

        def get_vocab(self):
            return {"<end>": 3, "<eot>": 7}

    class Template:
        stop_words = ["<eot>", "<end>", "STOP HERE"]

    class Gen:
        eos_token_id = 9

    assert stop_token_ids(Tok(), Template(), Gen()) == [7, 3, 9]
    Gen.eos_token_id = [3, 11]
    assert stop_token_ids(Tok(), Template(), Gen()) == [7, 3, 11]
    assert stop_token_ids(Tok(), Template()) == [7, 3]
    assert _assigned("stop_token_ids") == []
    defined = [
        str(p.relative_to(SRC))
        for p, tree in _modules()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.endswith(("stop_ids", "stop_token_ids", "_stops"))
    ]
    assert defined == ["model/stops.py", "model/stops.py", "train/stages/rollout.py"]  # rollout's calls model's


def _minus_100(tree) -> bool:
    return any(
        isinstance(n, ast.UnaryOp)
        and isinstance(n.op, ast.USub)
        and isinstance(n.operand, ast.Constant)
        and n.operand.value == 100
        for n in ast.walk(tree)
    )


def test_ignore_index_has_one_home():
    from tunekit.data.labels import IGNORE_INDEX

    assert IGNORE_INDEX == -100  # torch's and transformers' ignore_index
    assert _assigned("IGNORE_INDEX") == ["data/labels.py"]
    literal = [str(p.relative_to(SRC)) for p, tree in _modules() if _minus_100(tree)]
    assert literal == ["data/labels.py"]


def _constant_tuples(*, contains: set[str]) -> list[str]:
    """Modules with a tuple/list literal holding every string of ``contains``."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List)):
                values = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if contains <= values:
                    found.append(str(path.relative_to(SRC)))
    return found


def test_comma_lists_split_one_way():
    import re

    from tunekit.config.lists import split_list

    assert split_list(" q_proj, v_proj ,,o_proj ") == ["q_proj", "v_proj", "o_proj"]
    assert split_list(None) == split_list("") == split_list(" , ") == []
    pattern = re.compile(r'\.split\(","\)[^\n]*if \w+\.strip\(\)')
    helpers = [
        str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py")) if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert helpers == ["config/lists.py"]


def test_environment_switches_and_nnodes_read_one_way(monkeypatch):
    import re

    from tunekit.env import env_flag, env_nodes
    from tunekit.errors import ConfigError
    from tunekit.train.engines.launcher import launch_plan

    assert env_flag("FORCE_TORCHRUN", False, {"FORCE_TORCHRUN": "True"}) is True
    assert env_flag("FORCE_TORCHRUN", False, {"FORCE_TORCHRUN": "off"}) is False
    assert env_flag("FORCE_TORCHRUN", False, {}) is False
    cpu = {"CUDA_VISIBLE_DEVICES": ""}
    assert launch_plan({**cpu, "FORCE_TORCHRUN": "yes", "NPROC_PER_NODE": "2"}).launch
    assert not launch_plan(cpu).launch
    monkeypatch.setenv("HF_HUB_OFFLINE", "TRUE")
    assert env_flag("HF_HUB_OFFLINE", False)
    assert env_nodes({}) == env_nodes({"NNODES": " "}) == 1 and env_nodes({"NNODES": "2"}) == 2
    with pytest.raises(ConfigError) as err:
        env_nodes({"NNODES": "two"})
    assert str(err.value) == "NNODES='two' is not a whole number."
    with pytest.raises(ConfigError) as err:
        env_nodes({"NNODES": "0"})
    assert str(err.value) == "NNODES=0 must be at least 1."
    parsers = re.compile(r"(environ|getenv|env)\b[^\n]*\.lower\(\) in |_TRUE = ")
    assert [
        str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py")) if parsers.search(p.read_text(encoding="utf-8"))
    ] == []
    nnodes = {
        str(p.relative_to(SRC))
        for p, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value == "NNODES"
    }
    assert nnodes == {"env.py"}


def test_media_columns_and_processor_files_have_one_home():
    from tunekit.data.media_columns import MEDIA_COLUMNS, PROCESSOR_FILES

    assert MEDIA_COLUMNS == ("images", "videos", "audios")
    assert PROCESSOR_FILES == ("preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json")
    assert _constant_tuples(contains={"images", "videos", "audios"}) == [
        "data/formats.py"
    ]  # AUTO_COLUMNS: all columns
    assert _constant_tuples(contains=set(PROCESSOR_FILES)) == ["data/media_columns.py"]
    assert _assigned("MEDIA_COLUMNS") == ["data/media_columns.py"]
    assert _assigned("PROCESSOR_FILES") == ["data/media_columns.py"]


def test_dead_code_is_gone():
    from tunekit.data import lengths
    from tunekit.plan import fit, memory, stats

    assert not hasattr(fit, "current_preset") and not hasattr(lengths, "STAGE_COLUMNS")
    assert not hasattr(memory, "COMPONENTS") and not hasattr(stats, "MODES")
