"""The web board against a hostile user: a file read through a dataset entry, the server's
environment read through a secret field, and a login limit bypassed by parallel attempts or forged headers.

Each test replays the attack as the report described it, through the board's own calls (and real HTTP for the
login), then pins the refusal and its message.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import alpaca_records, write_dataset
from tunekit.config.secrets import SECRET_VARS_ENV, resolve_secrets
from tunekit.data.dataset_info import ROOTS_ENV, confined_to, hub_id_problem, resolve_datasets
from tunekit.errors import DataError
from tunekit.webui.board import Board
from tunekit.webui.paths import PathPolicy, excerpt

SECRET = "root:$6$SECRETSALT$0123456789abcdef:19000:0:99999:7:::"


@pytest.fixture
def ws(tmp_path):
    """A workspace with a registered dataset and, beside it, a private folder of data-like files."""
    root = tmp_path / "ws"
    write_dataset(root / "data", "demo", alpaca_records(2))
    private = tmp_path / "private"
    private.mkdir()
    (private / "notes.txt").write_text(SECRET + "\n")
    (private / "rows.json").write_text(json.dumps([{"instruction": SECRET, "input": "", "output": "x"}]))
    return root, private


def _board(root: Path, *allow: Path) -> Board:
    return Board(cwd=root, policy=PathPolicy(root, allow=allow, caches=[]))


# ------------------------------------------------------------------ 1. a file read through a dataset entry
def test_a_hub_field_naming_a_local_folder_never_reaches_the_preview(ws, tiny_qwen, monkeypatch):
    pytest.importorskip("transformers")
    root, private = ws
    (private / "notes.txt").unlink()  # one kind of file: datasets reads the folder as json
    monkeypatch.chdir(root)  # as `tunekit webui` does: relative paths resolve in the workspace
    board = _board(root, tiny_qwen)
    # the attack: "Save config" writes data/dataset_info.json, a dict option becoming a dataset entry
    board.save_yaml(
        {"lr_scheduler_kwargs": json.dumps({"hf_hub_url": str(private)})}, "data/dataset_info.json", overwrite=True
    )
    assert json.loads((root / "data" / "dataset_info.json").read_text()) == {
        "lr_scheduler_kwargs": {"hf_hub_url": str(private)}
    }
    form = {
        "model_name_or_path": str(tiny_qwen),
        "template": "qwen",
        "cutoff_len": "1024",
        "dataset_dir": "data",
        "dataset": "lr_scheduler_kwargs",
    }
    check, pieces, note = board.sample_preview(form, 1)
    assert (pieces, note) == ([], "")  # before the fix: the system prompt, then the file's row
    assert not check.ok and check.by_field["dataset"] == [
        f"Option 'dataset': dataset 'lr_scheduler_kwargs' hf_hub_url '{excerpt(private, 80)}' is not a hub id "
        f"(namespace/name): the board reads hub datasets by id only. Register a local file with file_name, inside "
        f"the workspace."
    ]


def test_every_place_a_dataset_names_is_inside_the_roots_or_refused(ws):
    root, private = ws
    (root / "ns" / "name").mkdir(parents=True)  # a hub-id-shaped local folder
    entries = {
        "file": {"file_name": "../../private/rows.json"},
        "hf_abs": {"hf_hub_url": str(private)},
        "hf_rel": {"hf_hub_url": "../private"},
        "hf_local": {"hf_hub_url": "ns/name"},
        "hf_dots": {"hf_hub_url": "a/.."},
        "ms": {"ms_hub_url": str(private)},
        "om": {"om_hub_url": "../private"},
        "both": {"file_name": "demo.json", "hf_hub_url": str(private)},  # the one not read is checked too
        "script": {"script_url": "../../private"},
        "cloud": {"cloud_file_name": "s3://bucket/rows.json"},
        "hub": {"hf_hub_url": "tatsu-lab/alpaca", "ms_hub_url": "llamafactory/alpaca_en"},
        "local": {"file_name": "demo.json"},
    }
    info = json.loads((root / "data" / "dataset_info.json").read_text())
    (root / "data" / "dataset_info.json").write_text(json.dumps({**info, **entries}))
    board = _board(root)
    base = {
        "model_name_or_path": "Qwen/Qwen2.5-0.5B",
        "template": "qwen",
        "stage": "pt",
        "dataset_dir": "data",
        "output_dir": "saves/run",
    }
    outside = f"is outside the folders this board may use ({root})"
    expected = {
        "file": f"file_name '{excerpt(root / 'data' / '../../private/rows.json', 80)}' {outside}",
        "hf_abs": f"hf_hub_url '{excerpt(private, 80)}' is not a hub id (namespace/name): the board reads",
        "hf_rel": "hf_hub_url '../private' is not a hub id (namespace/name)",
        "hf_local": f"hf_hub_url 'ns/name' is not a hub id: it names the local path {root / 'ns/name'}",
        "hf_dots": "hf_hub_url 'a/..' is not a hub id (namespace/name)",
        "ms": f"ms_hub_url '{excerpt(private, 80)}' is not a hub id",
        "om": "om_hub_url '../private' is not a hub id",
        "both": f"hf_hub_url '{excerpt(private, 80)}' is not a hub id",
        "script": f"script_url '{excerpt(root / 'data' / '../../private', 80)}' {outside}",
        "cloud": "cloud_file_name is refused: the board does not read cloud files.",
    }
    for name, message in expected.items():
        for option in ("dataset", "eval_dataset", "export_quantization_dataset"):
            check = board.validate(base | {"dataset": "local", option: name})
            assert not check.ok and check.by_field[option][0].startswith(
                f"Option '{option}': dataset '{name}' {message}"
            ), (name, option, check.message)
    assert board.validate(base | {"dataset": "hub,local,demo"}).ok
    # a dataset_info.json that cannot be read: nothing is checked, so the name is refused (it was let through)
    (root / "bad").mkdir()
    (root / "bad" / "dataset_info.json").write_text("{broken")
    check = board.validate(base | {"dataset_dir": "bad", "dataset": str(private / "rows.json")})
    assert check.by_field["dataset"] == [
        f"Option 'dataset': dataset '{excerpt(private / 'rows.json', 40)}': "
        f"{root / 'bad' / 'dataset_info.json'} is not valid JSON (line 1, column 2): "
        f"Expecting property name enclosed in double quotes."
    ]
    # the other options that name data places
    for option, value in (("media_dir", str(private)), ("tokenized_path", "../private/tok")):
        check = board.validate(base | {"dataset": "demo", option: value})
        assert check.by_field[option][0].startswith(f"Option '{option}' '{excerpt(value, 80)}' {outside}"), option


def test_hub_ids_are_only_hub_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub_id_problem("tatsu-lab/alpaca") is None and hub_id_problem("a_b/c.d-e") is None
    for value in ("alpaca", "/etc", "./a/b", "a/b/c", "a--b/c", "a/b.git", ".a/b", "a/b.", "~/x", "a/" + "b" * 95):
        assert hub_id_problem(value) == "is not a hub id (namespace/name)", value
    (tmp_path / "x" / "y").mkdir(parents=True)
    assert hub_id_problem("x/y") == f"is not a hub id: it names the local path {tmp_path / 'x/y'}"
    other = tmp_path / "other"
    (other / "u" / "v").mkdir(parents=True)
    assert hub_id_problem("u/v") is None and hub_id_problem("u/v", other) is not None


def test_the_boards_jobs_read_data_confined_to_its_roots(ws, monkeypatch):
    """A dataset_info.json changed after the board's check (or a job started past it) is held to the same rule
    where the data is read: in the job (``$TUNEKIT_DATA_ROOTS``) and in the preview (``confined_to``)."""
    root, private = ws
    data = root / "data"
    info = json.loads((data / "dataset_info.json").read_text())
    (data / "dataset_info.json").write_text(
        json.dumps(
            {
                **info,
                "hub": {"hf_hub_url": str(private)},
                "file": {"file_name": str(private / "rows.json")},
                "cloud": {"cloud_file_name": "s3://b/x.json"},
                "hidden": {"file_name": ".cache/x.json"},
            }
        )
    )
    assert [a.path for a in resolve_datasets(["hub", "file"], data)] == [str(private), str(private / "rows.json")]
    board = _board(root)
    env = board.job_env()
    assert env[ROOTS_ENV] == str(root)
    monkeypatch.setenv(ROOTS_ENV, env[ROOTS_ENV])
    monkeypatch.chdir(root)
    where = f"{data / 'dataset_info.json'}, entry"
    cases = {
        "hub": f"{where} 'hub': hf_hub_url '{private}' is not a hub id (namespace/name): give a hub dataset id, or "
        f"register a local file with file_name.",
        "file": f"{where} 'file': file_name '{private / 'rows.json'}' is outside the folders this job may read "
        f"({root}) or hidden: use a file inside them.",
        "cloud": f"{where} 'cloud': cloud_file_name is not read here: download the file into the workspace and "
        f"register it with file_name.",
        "hidden": f"{where} 'hidden': file_name '{data / '.cache/x.json'}' is outside the folders this job may read "
        f"({root}) or hidden: use a file inside them.",
        str(private / "rows.json"): f"Dataset '{private / 'rows.json'}': file_name '{private / 'rows.json'}' is "
        f"outside the folders this job may read ({root}) or hidden: use a file inside them.",
    }
    for name, message in cases.items():
        with pytest.raises(DataError) as err:
            resolve_datasets([name], data)
        assert str(err.value) == message, name
    assert [a.path for a in resolve_datasets(["demo"], data)] == [str(data / "demo.json")]
    monkeypatch.delenv(ROOTS_ENV)
    with confined_to([root]), pytest.raises(DataError, match="hf_hub_url .* is not a hub id"):
        resolve_datasets(["hub"], data)
    assert resolve_datasets(["hub"], data)[0].path == str(private)  # outside the board: as before


def test_a_job_started_past_the_check_refuses_the_entry(ws, tiny_qwen):
    root, private = ws
    (private / "notes.txt").unlink()
    data = root / "data"
    (data / "dataset_info.json").write_text(json.dumps({"leak": {"hf_hub_url": str(private)}}))
    board = _board(root, tiny_qwen)
    values = {
        "model_name_or_path": str(tiny_qwen),
        "template": "qwen",
        "dataset_dir": "data",
        "dataset": "leak",
        "cutoff_len": 64,
        "max_steps": 1,
        "output_dir": "saves/leak",
    }
    assert not board.validate(values).ok
    job = board.start_job("train", values, "saves/leak")  # as if dataset_info.json changed after the check
    assert board.runner.wait(120) not in (None, 0)
    log = job.log_path.read_text()
    assert f"entry 'leak': hf_hub_url '{private}' is not a hub id (namespace/name)" in log and SECRET not in log


# ------------------------------------------------------------------ 2. the environment read through a secret field
def test_a_reference_typed_into_a_secret_field_is_never_expanded_for_the_browser(tmp_path, monkeypatch):
    monkeypatch.setenv("TK_ATTACK_PRIVATE", "server-only-value")
    board = Board(cwd=tmp_path, policy=PathPolicy(tmp_path, caches=[]))
    form = {"swanlab_api_key": "${TK_ATTACK_PRIVATE}", "max_steps": "2"}
    saved = board.save_yaml(form, "s.yaml")
    assert "swanlab_api_key: ${TK_ATTACK_PRIVATE}\n" in saved.read_text()
    loaded = board.load_yaml("s.yaml")  # what the page receives
    assert loaded["swanlab_api_key"] == "${TK_ATTACK_PRIVATE}"
    check = board.validate(board.values(form))
    assert check.ok and check.config.swanlab_api_key == "${TK_ATTACK_PRIVATE}"
    _, cmd, yml = board.preview(form)
    assert "server-only-value" not in json.dumps(loaded) + cmd + yml + check.message
    # the job: only what the user set through the board is expanded
    board.secrets.update({"SWANLAB_API_KEY": "sk-typed"})  # what start_job keeps of a secret typed in the form
    env = {**os.environ, **board.job_env()}
    assert board.job_env()[SECRET_VARS_ENV] == "SWANLAB_API_KEY"
    masked = {
        "swanlab_api_key": "${SWANLAB_API_KEY}",
        "wandb_api_key": "${TK_ATTACK_PRIVATE}",
        "my_token": "${SWANLAB_API_KEY}",
    }
    assert resolve_secrets(masked, env) == {
        "swanlab_api_key": "sk-typed",
        "wandb_api_key": None,
        "my_token": "sk-typed",
    }
    # outside the board (no $TUNEKIT_SECRET_VARS) a reference is read from the environment, as documented
    assert resolve_secrets({"wandb_api_key": "${TK_ATTACK_PRIVATE}"}) == {"wandb_api_key": "server-only-value"}


# ------------------------------------------------------------------ 3. the login limit
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A board with a password on 127.0.0.1; ``start(**launch_kwargs)`` returns ``login(password, source, xff)``."""
    pytest.importorskip("gradio")
    from tunekit.webui.app import launch

    monkeypatch.chdir(tmp_path)
    demos = []

    def start(**kw):
        port = _free_port()
        demos.append(
            launch(
                "127.0.0.1",
                port,
                auth=("admin", "s3cret"),
                cwd=tmp_path,
                block=False,
                policy=PathPolicy(tmp_path, caches=[]),
                **kw,
            )
        )

        def login(password: str, source: str = "127.0.0.1", xff: str | None = None) -> int:
            body = urllib.parse.urlencode({"username": "admin", "password": password})
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            if xff:
                headers["X-Forwarded-For"] = xff
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
            try:
                conn.request("POST", "/login", body, headers)
                return conn.getresponse().status
            finally:
                conn.close()

        return login

    yield start
    for demo in demos:
        demo.close()
        demo.tk_board.runner.shutdown()


def test_parallel_login_attempts_check_no_more_passwords_than_the_limit(served):
    login = served()
    barrier = threading.Barrier(60)

    def attempt(i: int) -> int:
        barrier.wait(120)  # all at once (the old limit then checked 14 of them); any order gives the same
        return login(f"wrong{i}")

    with ThreadPoolExecutor(60) as pool:
        codes = list(pool.map(attempt, range(60)))
    assert sorted(codes) == [400] * 5 + [429] * 55
    assert login("s3cret") == 429


def test_forged_forwarded_for_headers_do_not_reset_the_login_limit(served):
    login = served()
    codes = [login("wrong", xff=f"10.9.{i}.1") for i in range(40)]
    assert codes == [400] * 5 + [429] * 35


def test_the_login_limit_is_global_too_and_believes_only_a_configured_proxy(served):
    before = os.environ.get("FORWARDED_ALLOW_IPS")
    login = served(trusted_proxies=["127.0.0.1"])
    assert os.environ.get("FORWARDED_ALLOW_IPS") == before  # set only while the server was built
    # through the trusted proxy, each forwarded client has its own count...
    assert [login("wrong", xff="10.0.0.1") for _ in range(6)] == [400] * 5 + [429]
    assert login("s3cret", xff="10.0.0.2") == 200  # ...a success takes no slot
    # ...and all clients together are capped: 20 failures a minute
    codes = [login("wrong", xff=f"10.0.1.{i}") for i in range(20)]
    assert codes == [400] * 15 + [429] * 5
    # an untrusted connection (another loopback address) is counted by its address, its header ignored
    try:
        socket.create_server(("127.0.0.2", 0)).close()
    except OSError:
        pytest.skip("127.0.0.2 is not a loopback address here")
    other = served()
    assert [other("wrong", source="127.0.0.2", xff=f"10.1.0.{i}") for i in range(6)] == [400] * 5 + [429]
    assert other("wrong", source="127.0.0.3") == 400


def test_a_trusted_proxy_must_be_an_address(tmp_path):
    from tunekit.errors import ConfigError
    from tunekit.webui.bind import check_trusted_proxies

    assert check_trusted_proxies(["127.0.0.1", " 10.0.0.0/24", "::1"]) == ["127.0.0.1", "10.0.0.0/24", "::1"]
    for bad in ("*", "proxy.local", "10.0.0.0/99"):
        with pytest.raises(ConfigError) as err:
            check_trusted_proxies([bad])
        assert str(err.value) == (
            f"--trusted-proxy {bad!r} is not an IP address or network: give the reverse "
            f"proxy's address, e.g. --trusted-proxy 127.0.0.1 or 10.0.0.0/24."
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADIO_SERVER")}
    out = subprocess.run(
        [sys.executable, "-P", "-m", "tunekit.cli.main", "webui", "--trusted-proxy", "*"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stdout) == (2, "") and out.stderr == (
        "error: --trusted-proxy '*' is not an IP address or network: give the reverse proxy's address, e.g. "
        "--trusted-proxy 127.0.0.1 or 10.0.0.0/24.\n"
    )


def test_media_a_record_names_are_as_confined_as_the_data_files(tmp_path):
    """Image/video/audio paths inside records: a job of the board reads them only inside its roots."""
    from tunekit.data.mm_plugins import resolve_media

    root, outside = tmp_path / "ws", tmp_path / "private"
    (root / "data").mkdir(parents=True)
    outside.mkdir()
    for folder in (root / "data", outside):
        (folder / "a.jpg").write_bytes(b"x")
    (root / "data" / ".hidden.jpg").write_bytes(b"x")
    assert resolve_media(["a.jpg", str(outside / "a.jpg")], "images", root / "data", "r") == [
        str(root / "data" / "a.jpg"),
        str(outside / "a.jpg"),
    ]  # not confined: as before
    with confined_to([root]):
        assert resolve_media(["a.jpg"], "images", root / "data", "r") == [str(root / "data" / "a.jpg")]
        for value in (str(outside / "a.jpg"), "../../private/a.jpg", ".hidden.jpg"):
            with pytest.raises(DataError, match=r"^r: images\[0\] .* is outside the folders this job may read"):
                resolve_media([value], "images", root / "data", "r")
