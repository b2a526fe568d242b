"""llama.cpp's own HF -> GGUF converter, taken from the llama-cpp-python source distribution of the installed version.

``convert_hf_to_gguf.py`` (with its ``conversion/`` package and its ``gguf-py``) is neither in the ``gguf`` wheel nor
in the llama-cpp-python wheel; it is in llama-cpp-python's sdist (``vendor/llama.cpp``), so the converter always
matches the llama.cpp that loads and quantizes the file. It is fetched once per version into
``<tunekit cache>/llama.cpp/llama_cpp_python-<version>/`` by ``pip download --no-deps --no-binary :all:`` (pip's index
settings apply) and only those files are extracted. ``TUNEKIT_LLAMA_CPP_SDIST`` names a local sdist (``.tar.gz``) or an
extracted sdist folder to use instead (offline machines); ``TUNEKIT_LLAMA_CPP_DIR`` moves the folder the converter is
extracted to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from ..env import cache_dir
from ..errors import EnvironmentProblem

SDIST_ENV = "TUNEKIT_LLAMA_CPP_SDIST"
DIR_ENV = "TUNEKIT_LLAMA_CPP_DIR"
PACKAGE = "llama-cpp-python"
CONVERTER = "convert_hf_to_gguf.py"
#: what is extracted from ``vendor/llama.cpp`` of the sdist
_MEMBERS = (CONVERTER, "conversion/", "gguf-py/gguf/", "LICENSE")
_INSTALL_HINT = (
    "pip install 'tunekit[gguf]' (llama-cpp-python is built from source on the CPU; see docs/after-training.md)"
)


def installed_version() -> str:
    """The installed llama-cpp-python version; an error naming the extra when it is missing."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        raise EnvironmentProblem(
            f"export_format: gguf needs llama-cpp-python (llama.cpp converts, quantizes and verifies the file): "
            f"{_INSTALL_HINT}."
        ) from None


def converter_dir() -> Path:
    """The folder holding ``convert_hf_to_gguf.py``, ``conversion/`` and ``gguf-py/`` of the installed version."""
    version = installed_version()
    root = Path(os.environ.get(DIR_ENV) or cache_dir("llama.cpp"))
    folder = root / f"llama_cpp_python-{version}"
    if (folder / CONVERTER).is_file():
        return folder
    given = os.environ.get(SDIST_ENV)
    if given:
        _install_from(Path(given).expanduser(), version, folder)
    else:
        with tempfile.TemporaryDirectory(prefix="tunekit-sdist-") as tmp:
            _install_from(_download(version, Path(tmp)), version, folder)
    return folder


def _download(version: str, into: Path) -> Path:
    print(f"fetching llama.cpp's converter: the {PACKAGE} {version} source distribution (once per version)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", str(into)]
    done = subprocess.run([*cmd, f"{PACKAGE}=={version}"], check=False, capture_output=True, text=True)
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise EnvironmentProblem(
            f"could not download the {PACKAGE} {version} source distribution, which holds llama.cpp's "
            f"convert_hf_to_gguf.py ({' / '.join(tail) or 'pip found no sdist'}); on an offline machine set "
            f"{SDIST_ENV} to a local llama_cpp_python-{version}.tar.gz."
        )
    return found[0]


def _install_from(source: Path, version: str, folder: Path) -> None:
    """Extract the converter files of ``source`` (an sdist .tar.gz or an extracted sdist folder) into ``folder``."""
    name = f"llama_cpp_python-{version}"
    if source.is_dir():
        if not (source / "vendor" / "llama.cpp" / CONVERTER).is_file():
            raise EnvironmentProblem(
                f"{SDIST_ENV}={source} is not an extracted {PACKAGE} sdist (no vendor/llama.cpp)."
            )
        if source.name != name:
            raise EnvironmentProblem(f"{SDIST_ENV}={source} is not {name}, the installed version: name its sdist.")
        vendor = source / "vendor" / "llama.cpp"
        _publish(folder, lambda tmp: _copy_members(vendor, tmp))
        return
    if not source.name.startswith(name + ".tar"):
        raise EnvironmentProblem(f"{SDIST_ENV}={source} is not {name}.tar.gz, the sdist of the installed version.")
    _publish(folder, lambda tmp: _extract_members(source, f"{name}/vendor/llama.cpp/", tmp))


def _publish(folder: Path, fill) -> None:
    """Fill a temporary folder beside ``folder``, then rename it: concurrent exports never see half a converter."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        fill(tmp)
        if not (tmp / CONVERTER).is_file():
            raise EnvironmentProblem(f"the {PACKAGE} sdist has no vendor/llama.cpp/{CONVERTER}")
        try:
            tmp.rename(folder)
        except OSError:  # another process published it first
            if not (folder / CONVERTER).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _copy_members(vendor: Path, into: Path) -> None:
    for member in _MEMBERS:
        src = vendor / member.rstrip("/")
        dst = into / member.rstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        elif src.is_file():
            shutil.copy2(src, dst)


def _extract_members(archive: Path, prefix: str, into: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        for info in tar:
            rel = info.name[len(prefix) :] if info.name.startswith(prefix) else None
            if not rel or not (info.isfile() and any(rel == m or rel.startswith(m) for m in _MEMBERS)):
                continue
            target = (into / rel).resolve()
            if not target.is_relative_to(into.resolve()):  # a crafted member name: never write outside the folder
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
