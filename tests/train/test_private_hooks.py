"""Every private name of transformers' Trainer that tunekit overrides or calls still exists in the pinned version.

A private hook can vanish or change in any transformers release without a deprecation; tunekit pins transformers in
constraints.txt, and this test fails on an upgrade that drops one, naming the hook and where tunekit uses it.
"""

from __future__ import annotations

import ast
import re

import transformers

from tests.helpers import ROOT

TRAIN = ROOT / "src" / "tunekit" / "train"


def _private_trainer_uses() -> dict[str, list[str]]:
    """``{name: [file:line, ...]}`` for each ``_name`` (not dunder) a train/ module defines as a method that the
    Trainer also has (an override), reaches through ``super()._name``, or reads as ``self._name`` /
    ``trainer._name``."""
    uses: dict[str, list[str]] = {}
    for path in sorted(TRAIN.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT / "src")
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.FunctionDef) and re.fullmatch(r"_[a-z]\w*", node.name):
                name = node.name if hasattr(transformers.Trainer, node.name) else None
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "super"
                and re.fullmatch(r"_[a-z]\w*", node.attr)
            ):
                name = node.attr
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "trainer")
                and re.fullmatch(r"_[a-z]\w*", node.attr)
                and hasattr(transformers.Trainer, node.attr)
            ):
                name = node.attr  # a private Trainer method or attribute read directly
            if name:
                uses.setdefault(name, []).append(f"{where}:{node.lineno}")
    return uses


def test_transformers_is_the_pinned_version():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().split() if "==" in line)
    assert transformers.__version__ == pins["transformers"]


def test_every_private_trainer_hook_tunekit_uses_exists():
    uses = _private_trainer_uses()
    missing = {name: places for name, places in uses.items() if not hasattr(transformers.Trainer, name)}
    assert missing == {}, f"private Trainer names gone in transformers {transformers.__version__}: {missing}"
    # the list is pinned: a new override of a private hook is a decision to make here, not by accident
    assert sorted(uses) == [
        "_build_accelerator_args",
        "_get_grad_norm",
        "_get_train_sampler",
        "_load_best_model",
        "_load_from_checkpoint",
        "_load_optimizer_and_scheduler",
        "_move_model_to_device",
        "_prepare_inputs",
        "_save",
        "_save_optimizer_and_scheduler",
        "_track_num_input_tokens",
    ]


def _private_trainer_overrides() -> dict[str, list[str]]:
    """``{name: [file:Class, ...]}``: the classes in src/tunekit (a ``*Trainer`` or ``*Mixin``, or one whose bases are)
    that define a private (``_name``, not dunder) method transformers' Trainer also has."""
    owners: dict[str, list[str]] = {}
    for path in sorted((ROOT / "src" / "tunekit").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            names = [cls.name] + [ast.unparse(base).split(".")[-1] for base in cls.bases]
            if not any(name.endswith(("Trainer", "Mixin")) for name in names):
                continue
            for method in cls.body:
                if (
                    isinstance(method, ast.FunctionDef)
                    and re.fullmatch(r"_[a-z]\w*", method.name)
                    and hasattr(transformers.Trainer, method.name)
                ):
                    owners.setdefault(method.name, []).append(f"{path.relative_to(ROOT / 'src')}:{cls.name}")
    return owners


def test_each_private_trainer_hook_is_overridden_by_one_class():
    # two overrides of one hook chain through super() in an order the MRO decides: one class, one place to read
    owners = _private_trainer_overrides()
    assert "_save" in owners and "_load_from_checkpoint" in owners  # the walk finds the overrides at all
    shared = {name: classes for name, classes in owners.items() if len(classes) > 1}
    assert shared == {}, f"private Trainer hooks overridden in more than one class: {shared}"
