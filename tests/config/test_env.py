"""``tunekit.env``: every TUNEKIT_* switch and the cache folder are read the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunekit.env import cache_dir, env_flag


@pytest.mark.parametrize(
    "value, default, expected",
    [
        (None, True, True),
        (None, False, False),
        ("", True, True),
        ("  ", False, False),
        ("0", True, False),
        ("false", True, False),
        ("No", True, False),
        ("OFF", True, False),
        ("1", False, True),
        ("true", False, True),
        ("yes", False, True),
    ],
)
def test_env_flag(monkeypatch, value, default, expected):
    if value is None:
        monkeypatch.delenv("TUNEKIT_SOME_SWITCH", raising=False)
    else:
        monkeypatch.setenv("TUNEKIT_SOME_SWITCH", value)
    assert env_flag("TUNEKIT_SOME_SWITCH", default) is expected


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TUNEKIT_CACHE", str(tmp_path))
    assert cache_dir("warm") == tmp_path / "warm"
    monkeypatch.delenv("TUNEKIT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("datasets", "x") == Path(tmp_path / "home" / ".cache" / "tunekit" / "datasets" / "x")
