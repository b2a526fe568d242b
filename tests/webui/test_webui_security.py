"""The web board's security model: nobody who reaches the board can run code, read the
server's files or its secrets; a taken port is one clear line.

Each test reproduces the defect first where the old behaviour can still be run (the old job argv imports
a planted ``yaml.py``), then pins the refusal and its message.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import alpaca_records, write_dataset
from tunekit.config import load_config, save_config
from tunekit.config.secrets import is_secret, mask_secrets, resolve_secrets
from tunekit.errors import ConfigError, EnvironmentProblem
from tunekit.webui.bind import check_exposure, check_port
from tunekit.webui.board import Board
from tunekit.webui.paths import PathPolicy, PathRefused, excerpt
from tunekit.webui.ratelimit import LoginRateLimit

SECRET_LINES = [f"user{i}:$6$Zq{i}SECRETSALT$hashhashhashhashhash{i}:19000:0:99999:7:::" for i in range(6)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("GRADIO_SERVER_NAME", None)
    env.pop("GRADIO_SERVER_PORT", None)
    return subprocess.run(
        [sys.executable, "-P", "-m", "tunekit.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def ws(tmp_path):
    """A workspace and, beside it, a private folder the board must not reach."""
    root = tmp_path / "ws"
    root.mkdir()
    private = tmp_path / "private"
    private.mkdir()
    (private / "notes.txt").write_text("\n".join(SECRET_LINES) + "\n")
    return root, private


def _board(root: Path, **kw) -> Board:
    return Board(cwd=root, policy=PathPolicy(root, caches=[], **kw))


# ------------------------------------------------------------------ 1. no code planted through "Save config"
def test_save_config_only_writes_config_files_inside_the_workspace(ws):
    root, private = ws
    board = _board(root)
    form = {"learning_rate": "0.001", "max_steps": "4"}
    for path, why in [
        ("yaml.py", "only saves .yaml, .yml or .json files"),
        ("sitecustomize.pth", "only saves .yaml, .yml or .json files"),
        ("../escape.yaml", "outside the folders this board may use"),
        (str(private / "x.yaml"), "outside the folders this board may use"),
        (".github/workflows/ci.yml", "does not read or write hidden files or folders ('.github')"),
        ("", "give a file name"),
    ]:
        with pytest.raises(PathRefused, match=why.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            board.save_yaml(form, path)
    assert sorted(p.name for p in root.parent.iterdir()) == ["private", "ws"] and list(root.iterdir()) == []

    saved = board.save_yaml(form, "configs/run.yaml")
    assert saved == root / "configs" / "run.yaml"
    assert saved.read_text() == "learning_rate: 0.001\nmax_steps: 4\n"
    with pytest.raises(PathRefused, match=r"already exists: tick 'Overwrite' to replace it"):
        board.save_yaml({"max_steps": "9"}, "configs/run.yaml")
    assert saved.read_text() == "learning_rate: 0.001\nmax_steps: 4\n"  # untouched without the tick
    board.save_yaml({"max_steps": "9"}, "configs/run.yaml", overwrite=True)
    assert saved.read_text() == "max_steps: 9\n"
    as_json = board.save_yaml(form, "configs/run.json")
    assert json.loads(as_json.read_text()) == {"learning_rate": 0.001, "max_steps": 4}
    assert load_config(as_json).max_steps == 4


def test_a_yaml_py_in_the_board_folder_is_not_imported_by_a_job(tmp_path):
    marker = tmp_path / "PLANTED_CODE_RAN"
    (tmp_path / "yaml.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise ImportError('planted')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    # the defect: the board used to run `python -m tunekit.cli.main`, which puts its folder first on sys.path
    old = subprocess.run(
        [sys.executable, "-m", "tunekit.cli.main", "train", "no_such_option=1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert marker.read_text() == "ran" and "planted" in old.stderr
    marker.unlink()

    board = Board(cwd=tmp_path)
    job = board.runner.start("train", ["no_such_option=1"], "out")
    assert board.runner.wait(60) == 2
    log = job.log_path.read_text()
    assert "error: Unknown option 'no_such_option'" in log  # the job parsed its options: it imported yaml
    assert not marker.exists() and "planted" not in log


# ------------------------------------------------------------------ 2. no file read through paths
def test_paths_outside_the_allowed_roots_are_refused_at_their_field(ws):
    root, private = ws
    board = _board(root)
    write_dataset(root / "data", "demo", alpaca_records(4))
    (root / ".env").write_text("TOKEN=abc\n")
    info = json.loads((root / "data" / "dataset_info.json").read_text())
    info["escape"] = {"file_name": "../../private/notes.txt"}
    (root / "data" / "dataset_info.json").write_text(json.dumps(info))
    base = {
        "model_name_or_path": "Qwen/Qwen2.5-0.5B",
        "template": "qwen",
        "dataset_dir": "data",
        "stage": "pt",
        "output_dir": "saves/run",
    }
    assert board.validate(base | {"dataset": "demo"}).ok  # a hub id and data inside the workspace

    notes = str(private / "notes.txt")
    cases = {
        "dataset": (notes, f"Option 'dataset': dataset '{excerpt(notes, 40)}' file '{excerpt(notes, 80)}' is outside"),
        "model_name_or_path": (
            str(private),
            f"Option 'model_name_or_path' '{excerpt(private, 80)}' is outside the folders this board "
            f"may use ({root}). Use a path inside them, or restart the board with "
            f"--allow-path DIR (or --workspace DIR).",
        ),
        "adapter_name_or_path": (
            f"saves/a,{private}",
            f"Option 'adapter_name_or_path' '{excerpt(private, 80)}' is outside",
        ),
        "dataset_dir": ("../private", "Option 'dataset_dir' '../private' is outside"),
        "output_dir": (str(private / "out"), "Option 'output_dir'"),
        "deepspeed": (str(private / "ds.json"), "Option 'deepspeed'"),
        "new_special_tokens_config": (str(private / "notes.txt"), "Option 'new_special_tokens_config'"),
        "ray_storage_path": (str(private / "ray"), "Option 'ray_storage_path'"),
    }
    for option, (value, message) in cases.items():
        check = board.validate(base | {"dataset": "demo", option: value})
        assert not check.ok and check.by_field[option] == [check.message], option
        assert check.message.startswith(message), (option, check.message)
    (private / "dataset_info.json").write_text(json.dumps({"private_name": {"file_name": "notes.txt"}}))
    assert board.dataset_names("data") == ["demo", "escape"] and board.dataset_names(str(private)) == []
    check = board.validate(base | {"dataset": "escape"})
    assert not check.ok and "dataset 'escape' file" in check.by_field["dataset"][0]
    check = board.validate(base | {"dataset": ".env"})
    assert not check.ok and "hidden files or folders ('.env')" in check.by_field["dataset"][0]
    assert board.validate(base | {"deepspeed": "z3", "dataset": "demo"}).ok  # a preset is not a path
    # symlinks are followed: a link inside the workspace to the private folder is outside
    (root / "link").symlink_to(private)
    check = board.validate(base | {"dataset": "link/notes.txt"})
    assert not check.ok and "is outside" in check.by_field["dataset"][0]
    # code named in the form runs only when the person who started the board allowed it
    for option, value in (("trust_remote_code", True), ("ray_init_kwargs", {"runtime_env": {"pip": ["evil"]}})):
        check = board.validate(base | {"dataset": "demo", option: value})
        assert check.by_field[option][0].startswith(f"Option '{option}' runs code named in the form"), option
    # whoever started the board may allow more
    opened = _board(root, allow=[private], allow_remote_code=True)
    assert opened.validate(base | {"dataset": notes, "trust_remote_code": True}).ok


def test_the_sample_preview_never_opens_a_file_outside_the_roots(ws, tiny_qwen):
    pytest.importorskip("transformers")
    root, private = ws
    form = {
        "model_name_or_path": str(tiny_qwen),
        "template": "qwen",
        "stage": "pt",
        "cutoff_len": "64",
        "dataset": str(private / "notes.txt"),
    }
    check, pieces, _ = _board(root, allow=[tiny_qwen]).sample_preview(form, 1)
    assert not check.ok and pieces == [] and "SECRETSALT" not in check.message
    assert check.by_field["dataset"][0].endswith(
        "is outside the folders this board may use "
        f"({root}, {tiny_qwen}). Use a path inside them, or restart the "
        "board with --allow-path DIR (or --workspace DIR)."
    )
    # the same form, once whoever started the board allowed the folder: the preview shows the file (the defect)
    check, pieces, note = _board(root, allow=[tiny_qwen, private]).sample_preview(form, 1)
    assert check.ok and note == "" and SECRET_LINES[0] in "".join(text for text, _ in pieces)


def test_load_config_never_echoes_file_contents(ws):
    root, private = ws
    board = _board(root)
    shadow = private / "shadow.yaml"
    shadow.write_text("\n".join(line.replace(":", ": ", 1) for line in SECRET_LINES) + "\n")
    with pytest.raises(PathRefused, match="is outside the folders this board may use") as refused:
        board.load_yaml(str(shadow))  # refused before it is read
    assert "SECRETSALT" not in str(refused.value)

    def assert_no_echo(path: Path) -> str:
        with pytest.raises(ConfigError) as err:
            board.load_yaml(path.name)
        text, message = path.read_text(), str(err.value)
        leaked = [text[i : i + 25] for i in range(len(text) - 24) if text[i : i + 25] in message]
        assert leaked == [], message  # at most a 24-character excerpt of what the file holds
        return message

    cases = {
        # lines of a password file as option: value -> unknown options
        "secret_keys.yaml": (
            "\n".join(f"{line.replace(':', '_')}: x" for line in SECRET_LINES),
            "6 unknown option(s): 'user0_$6$Zq0SECRETSALT$h…', 'user1_$6$Zq1SECRETSALT$h…', "
            "'user2_$6$Zq2SECRETSALT$h…' ...",
        ),
        # not YAML at all -> only the line and column
        "broken.yaml": (
            "ok: 1\n" + SECRET_LINES[0] + "\n  - : ] " + SECRET_LINES[1] + "\n",
            "is not valid YAML (line ",
        ),
        # a secret as a value -> the schema's message, with the value cut short
        "values.yaml": (
            f"learning_rate: {SECRET_LINES[2].replace(':', '-')}\n",
            "Option 'learning_rate' (in values.yaml) got 'user2-$6$Zq2SECRETSALT$h…' (str), expected",
        ),
        "lines.json": (json.dumps(SECRET_LINES), "must hold a mapping of option: value, found list."),
    }
    for name, (text, expected) in cases.items():
        (root / name).write_text(text)
        assert expected in assert_no_echo(root / name), name
    (root / "notes.txt").write_text("a: 1\n")
    with pytest.raises(PathRefused, match=r"only loads \.yaml, \.yml or \.json files"):
        board.load_yaml("notes.txt")


# ------------------------------------------------------------------ 3.+4. what the server serves, who may log in
def test_the_server_serves_only_the_board_folder_and_rate_limits_login(ws, monkeypatch):
    pytest.importorskip("gradio")
    from tunekit.webui.app import launch

    root, _ = ws
    monkeypatch.chdir(root)
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    (root / ".env").write_text("TOKEN=abc\n")
    (root / "notes.txt").write_text("notes\n")
    port = _free_port()
    demo = launch(
        "127.0.0.1",
        port,
        auth=("admin", "s3cret"),
        cwd=root,
        block=False,
        policy=PathPolicy(root, caches=[]),
        max_upload_bytes=10_000,
    )
    try:
        board = demo.tk_board
        plot = root / "saves" / "training_loss.png"
        plot.parent.mkdir(parents=True)
        plot.write_bytes(b"\x89PNG fake plot")
        copy = Path(board.served_copy(plot))
        assert copy.parent == board.served_dir and copy.read_bytes() == b"\x89PNG fake plot"
        assert demo.allowed_paths == [str(board.served_dir)]
        base = f"http://127.0.0.1:{port}"
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

        def login(password: str) -> tuple[int, dict]:
            data = urllib.parse.urlencode({"username": "admin", "password": password}).encode()
            try:
                with opener.open(urllib.request.Request(f"{base}/login", data=data), timeout=30) as r:
                    return r.status, dict(r.headers)
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers)

        def get(path: Path) -> int:
            try:
                with opener.open(f"{base}/gradio_api/file={path}", timeout=30) as r:
                    return r.status
            except urllib.error.HTTPError as exc:
                return exc.code

        def upload(data: bytes) -> tuple[int, bytes]:
            body = (
                b'--tk\r\nContent-Disposition: form-data; name="files"; filename="a.png"\r\n'
                b"Content-Type: image/png\r\n\r\n" + data + b"\r\n--tk--\r\n"
            )
            req = urllib.request.Request(
                f"{base}/gradio_api/upload", data=body, headers={"Content-Type": "multipart/form-data; boundary=tk"}
            )
            try:
                with opener.open(req, timeout=30) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        assert login("s3cret")[0] == 200
        assert get(copy) == 200  # the route serves the board's own folder...
        assert upload(b"x" * 10_001) == (413, b"File size exceeded maximum allowed size of 10000 bytes.")
        assert upload(b"x" * 10_000)[0] == 200  # uploads (the Chat tab's images) up to --max-upload-mb
        for path in (root / ".ssh" / "id_rsa", root / ".env", root / "notes.txt", plot):
            assert get(path) == 403, path  # ...and nothing else under the start folder
        # 5 wrong passwords a minute per client, then 429 (even for the right one) with Retry-After
        assert [login("wrong")[0] for _ in range(5)] == [400] * 5
        code, headers = login("s3cret")
        assert code == 429 and 55 <= int(headers["retry-after"]) <= 61
    finally:
        demo.close()
        board.runner.shutdown()


def test_login_rate_limit_window():
    now = [0.0]
    limit = LoginRateLimit(None, max_failures=5, window_s=60.0, clock=lambda: now[0])
    for t in range(5):
        now[0] = float(t)
        assert limit.retry_after("10.0.0.1") == 0.0
        limit.record_failure("10.0.0.1")
    now[0] = 5.0
    assert limit.retry_after("10.0.0.1") == 55.0 and limit.retry_after("10.0.0.2") == 0.0
    now[0] = 60.0  # the first failure has left the window: one more try
    assert limit.retry_after("10.0.0.1") == 0.0


def test_an_exposed_board_needs_a_password_or_an_explicit_flag(tmp_path):
    for host, share in (("0.0.0.0", False), ("192.168.1.5", False), ("127.0.0.1", True)):
        with pytest.raises(
            ConfigError,
            match="without a password: anyone who reaches it can start jobs. Pass "
            "--auth USER:PASSWORD, bind to 127.0.0.1, or pass --i-understand-no-auth",
        ):
            check_exposure(host, share, None, False)
        check_exposure(host, share, ("u", "p"), False)
        check_exposure(host, share, None, True)
    check_exposure("127.0.0.1", False, None, False)
    out = _cli(["webui", "--host", "0.0.0.0"], tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        "error: refusing to serve the board on 0.0.0.0, which other machines can reach without a "
        "password: anyone who reaches it can start jobs. Pass --auth USER:PASSWORD, bind to "
        "127.0.0.1, or pass --i-understand-no-auth to accept it.\n"
    )


def test_workspace_and_allowed_paths_must_be_folders(tmp_path):
    out = _cli(["webui", "--workspace", str(tmp_path / "nope")], tmp_path)
    assert (out.returncode, out.stderr) == (
        2,
        f"error: --workspace {tmp_path / 'nope'} is not a folder: create it or pass an existing one.\n",
    )
    out = _cli(["webui", "--allow-path", str(tmp_path / "nope")], tmp_path)
    assert (out.returncode, out.stderr) == (
        2,
        f"error: --allow-path {tmp_path / 'nope'} is not a folder: pass an existing folder.\n",
    )


# ------------------------------------------------------------------ 6. a taken port
def test_a_taken_port_is_one_line_naming_the_port_and_the_fix(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EnvironmentProblem):
            check_port("127.0.0.1", port)
        out = _cli(["webui", "--port", str(port)], tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == (
        f"error: port {port} on 127.0.0.1 is already in use (another board or server?): choose a "
        f"free one with --port {port + 1} or GRADIO_SERVER_PORT={port + 1}.\n"
    )


# ------------------------------------------------------------------ 5. secrets
def test_secret_options_are_named_by_one_rule():
    from tunekit.config import Config

    flagged = sorted(n for n in Config.model_fields if is_secret(n))
    assert "swanlab_api_key" in flagged
    for name in (
        "max_new_tokens",
        "add_special_tokens",
        "split_special_tokens",
        "ignore_pad_token_for_loss",
        "generation_max_new_tokens",
        "trained_tokens_loss",
    ):
        assert not is_secret(name), name
    assert all(is_secret(n) for n in ("hub_token", "my_service_secret", "db_password", "openai_api_key"))
    assert mask_secrets({"swanlab_api_key": "sk-1", "hub_token": "hf_x", "my_secret": None, "lr": 1}) == {
        "swanlab_api_key": "${SWANLAB_API_KEY}",
        "hub_token": "${HF_TOKEN}",
        "my_secret": None,
        "lr": 1,
    }
    assert resolve_secrets(
        {"swanlab_api_key": "${SWANLAB_API_KEY}", "run_name": "${SWANLAB_API_KEY}"}, {"SWANLAB_API_KEY": "sk-env"}
    ) == {"swanlab_api_key": "sk-env", "run_name": "${SWANLAB_API_KEY}"}


def test_saved_configs_hold_references_not_secrets(tmp_path, monkeypatch):
    old_umask = os.umask(0o022)
    try:
        cfg = load_config(None, {"swanlab_api_key": "sk-live-0123456789", "output_dir": "o"})
        path = save_config(cfg, tmp_path / "run")
        text = path.read_text()
        assert "swanlab_api_key: ${SWANLAB_API_KEY}\n" in text and "sk-live" not in text
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        plain = save_config(load_config(None, {"output_dir": "o"}), tmp_path / "plain")
        assert stat.S_IMODE(plain.stat().st_mode) == 0o644
    finally:
        os.umask(old_umask)
    monkeypatch.setenv("SWANLAB_API_KEY", "sk-from-env")
    assert load_config(path).swanlab_api_key == "sk-from-env"  # read back from the environment
    monkeypatch.delenv("SWANLAB_API_KEY")
    assert load_config(path).swanlab_api_key is None
    # the board: the preview, the saved YAML and the job's argv and log hold the reference only
    board = Board(cwd=tmp_path)
    form = {"swanlab_api_key": "sk-live-0123456789", "max_steps": "2"}
    _, cmd, yml = board.preview(form)
    assert "'swanlab_api_key=${SWANLAB_API_KEY}'" in cmd and "sk-live" not in cmd + yml
    saved = board.save_yaml(form, "board.yaml")
    assert "sk-live" not in saved.read_text() and stat.S_IMODE(saved.stat().st_mode) == 0o600
    job = board.start_job("train", {**board.values(form), "no_such_option": 1}, "out", form=form)
    board.runner.wait(60)
    assert "sk-live" not in " ".join(job.proc.args) and "sk-live" not in job.log_path.read_text()
    assert "swanlab_api_key=${SWANLAB_API_KEY}" in job.log_path.read_text().splitlines()[0]
    assert job.form["swanlab_api_key"] == "${SWANLAB_API_KEY}"  # what a reloaded page gets back
    assert board.secrets == {"SWANLAB_API_KEY": "sk-live-0123456789"}  # what the job's environment gets
    assert stat.S_IMODE(job.log_path.stat().st_mode) == 0o600
