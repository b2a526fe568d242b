"""Read raw records from local files (json, jsonl, csv, parquet, txt, or a folder of them) or a hub.

Records keep their origin (``file`` and index) so every later error can name them. A file that is
not what its extension says raises a :class:`DataError` with the file name and the position.

Text files are read as UTF-8; a UTF-8 byte-order mark is accepted (``utf-8-sig``). A file in another
encoding is a :class:`DataError` naming the file, the byte offset and line of the first undecodable byte,
the likely encoding and the ``iconv`` command that converts it. An unparsable JSONL line stops the read
(file and line named) or, with ``bad_records: skip``, becomes a record that fails validation, so the
pipeline skips it and lists it in ``preprocessing_report.json`` like any other invalid record.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.problem_texts import ENGLISH
from ..config.problems import Said
from ..env import env_flag
from ..errors import DataError

if TYPE_CHECKING:  # annotations only: dataset_info.py reads its files with read_text below
    from .dataset_info import DatasetAttr

SUFFIXES = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".txt": "text",
    ".arrow": "arrow",
}


ENCODING = "utf-8-sig"  # UTF-8, with or without a byte-order mark


@dataclass
class RawRecord:
    data: dict[str, Any]
    file: str
    index: int  # 0-based position in the file (line number - 1 for jsonl/txt)
    #: why the source could not be parsed into a record (``bad_records: skip``, a keyed message); the formats layer
    #: raises it
    error: str | None = None

    @property
    def where(self) -> str:
        """``FILE, record N`` (keyed: the board says it in its language)."""
        return Said("part_where_record", file=self.file, index=self.index)

    @property
    def source(self) -> str:
        """:attr:`where` as plain text, stored with each sample: made from the same template without the keyed
        machinery, which costs ~5 µs a record (under 1 µs this way)."""
        return ENGLISH["part_where_record"].format(file=self.file, index=self.index)


def where_of(source: str) -> str:
    """A sample's ``_source`` (:attr:`RawRecord.where`, stored in the dataset as text) keyed again."""
    file, sep, index = source.rpartition(", record ")
    return Said("part_where_record", file=file, index=int(index)) if sep and index.isdigit() else source


def read_records(attr: DatasetAttr, cache_dir: str | None = None, bad_records: str = "error") -> list[RawRecord]:
    """Every record of the dataset; ``bad_records="skip"`` turns an unparsable JSONL line into a bad record."""
    if attr.load_from == "file":
        return list(_read_local(Path(attr.path), bad_records))
    if attr.load_from in ("hf_hub", "ms_hub", "om_hub", "script"):
        return _read_hub(attr, cache_dir)
    raise DataError(Said("data_load_from", name=attr.name, path=str(attr.path), source=attr.load_from))


def _check_readable(path: Path) -> None:
    """A missing file, a symlink loop or a file that is not a regular file (a named pipe, a device, a socket would
    block or never end) is a :class:`DataError` naming the file, before anything opens it."""
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:  # Python 3.10-3.12 report a loop this way, 3.13 as OSError(ELOOP)
            raise DataError(Said("data_symlink_loop", path=str(path))) from None
        except OSError as exc:
            if exc.errno == 40:
                raise DataError(Said("data_symlink_loop", path=str(path))) from None
            raise DataError(Said("data_symlink_broken", path=str(path), target=repr(os.readlink(path)))) from None
    if not path.exists():
        raise DataError(Said("data_file_missing", path=str(path)))
    if not (path.is_dir() or path.is_file()):
        raise DataError(Said("data_file_not_regular", path=str(path)))


def _read_local(path: Path, bad_records: str = "error") -> Iterator[RawRecord]:
    _check_readable(path)
    if path.is_dir():
        files = data_files(path)
        if not files:
            raise DataError(Said("data_folder_empty", path=str(path)))
        kinds = {SUFFIXES[p.suffix] for p in files}
        if len(kinds) > 1:
            raise DataError(Said("data_folder_mixed", path=str(path), kinds=", ".join(sorted(kinds))))
        for p in files:
            yield from _read_file(p, bad_records)
    else:
        yield from _read_file(path, bad_records)


def data_files(folder: Path) -> list[Path]:
    """The data files a dataset folder is read from: its own files with a data suffix (subfolders are not read)."""
    return sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file())


def _read_file(path: Path, bad_records: str = "error") -> Iterator[RawRecord]:
    try:
        yield from _parse_file(path, bad_records)
    except UnicodeDecodeError:
        raise encoding_error(path) from None


def read_text(path: str | Path) -> str:
    """A whole text file (UTF-8, BOM accepted); another encoding is a :class:`DataError` saying how to convert."""
    try:
        return Path(path).read_text(encoding=ENCODING)
    except UnicodeDecodeError:
        raise encoding_error(Path(path)) from None


def encoding_error(path: Path) -> DataError:
    """The error for a file that is not UTF-8: where the first bad byte is, what the file likely is, the fix."""
    offset, line, sample, bad = _first_bad_byte(path)
    guess = _guess_encoding(sample)
    likely = Said("part_encoding_guess", encoding=guess) if guess else Said("part_encoding_unknown")
    converted = path.with_name(path.stem + ".utf8" + path.suffix)
    return DataError(
        Said(
            "data_not_utf8",
            path=str(path),
            offset=offset,
            line=line,
            bytes=bad.hex(" "),
            likely=likely,
            source=guess or "<ENCODING>",
            converted=str(converted),
        )
    )


_SAMPLE = 1 << 16  # bytes the encoding is guessed from: from the start of the line with the first bad byte


def _first_bad_byte(path: Path) -> tuple[int, int, bytes, bytes]:
    """(byte offset, 1-based line, sample from the start of that line, the first bad bytes) of a non-UTF-8 file."""
    decoder = codecs.getincrementaldecoder("utf-8")()  # a BOM is valid UTF-8: offsets count from byte 0
    done, newlines = 0, 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            pending = len(decoder.getstate()[0])  # an incomplete sequence held back from the previous chunk
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                offset = done - pending + exc.start
                before = chunk[: max(offset - done, 0)]
                newlines += before.count(b"\n")
                line_start = done + before.rfind(b"\n") + 1 if b"\n" in before else max(0, offset - _SAMPLE // 2)
                f.seek(line_start)
                sample = f.read(_SAMPLE)
                return offset, newlines + 1, sample, sample[offset - line_start :][:4]
            if not chunk:  # decodes after all: nothing to point at
                return 0, 1, b"", b""
            done += len(chunk)
            newlines += chunk.count(b"\n")


#: fallback guesses when charset_normalizer is missing: encodings data files commonly come in
_CANDIDATES = ("gb18030", "big5", "shift_jis", "euc-kr", "cp1252")
#: Python codec name -> the name iconv knows
_ICONV = {
    "utf_16": "UTF-16",
    "gb18030": "GB18030",
    "gb2312": "GB2312",
    "gbk": "GBK",
    "big5": "BIG5",
    "shift_jis": "SHIFT_JIS",
    "cp932": "CP932",
    "euc_jp": "EUC-JP",
    "euc_kr": "EUC-KR",
    "cp949": "CP949",
    "cp1252": "CP1252",
    "latin_1": "ISO-8859-1",
    "iso8859_1": "ISO-8859-1",
    "cp1251": "CP1251",
}


def _iconv_name(codec: str) -> str:
    name = codecs.lookup(codec).name.replace("-", "_")
    return _ICONV.get(name, name.upper().replace("_", "-"))


def _guess_encoding(sample: bytes) -> str | None:
    """The likely encoding of ``sample`` as iconv names it (UTF-16 by its BOM, else charset_normalizer's guess)."""
    if sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "UTF-16"
    try:
        from charset_normalizer import from_bytes  # installed with datasets (through requests)
    except ImportError:  # pragma: no cover - the detector is missing: try the common ones
        for enc in _CANDIDATES:
            try:
                sample.decode(enc)
                return _iconv_name(enc)
            except UnicodeDecodeError:
                continue
        return None
    matches = from_bytes(sample)
    best = matches.best()
    if best is None or best.encoding in ("utf_8", "ascii"):
        return None
    # near-ties (short samples): the encoding data files are usually in wins (cp1252 over cp1257, shift_jis over cp932)
    close = {name for m in matches if m.chaos <= best.chaos + 0.1 for name in m.could_be_from_charset}
    preferred = next((enc.replace("-", "_") for enc in _CANDIDATES if enc.replace("-", "_") in close), best.encoding)
    return _iconv_name(preferred)


def _parse_file(path: Path, bad_records: str) -> Iterator[RawRecord]:
    kind = SUFFIXES.get(path.suffix)
    if kind is None:
        raise DataError(Said("data_bad_extension", path=str(path), suffix=path.suffix))
    if kind == "json":
        yield from _read_json(path, bad_records)
    elif kind == "jsonl":
        yield from _read_jsonl(path, bad_records)
    elif kind == "text":
        with open(path, encoding=ENCODING) as f:
            for i, raw_line in enumerate(f):
                line = raw_line.rstrip("\n")
                if line.strip():
                    yield RawRecord({"text": line}, str(path), i)
    else:
        yield from _read_tabular(path, kind)


def _read_json(path: Path, bad_records: str = "error") -> Iterator[RawRecord]:
    text = path.read_text(encoding=ENCODING)
    try:
        data = json.loads(text, parse_constant=_not_json(path))
    except RecursionError:
        raise DataError(Said("data_json_too_deep", path=str(path), limit=sys.getrecursionlimit())) from None
    except json.JSONDecodeError as exc:
        # A .json file holding one object per line is common: accept it as jsonl.
        if exc.msg.startswith("Extra data") and text.lstrip().startswith("{"):
            yield from _read_jsonl(path, bad_records)
            return
        said = Said("data_json_invalid", path=str(path), line=exc.lineno, column=exc.colno, error=exc.msg)
        raise DataError(said) from None
    if isinstance(data, dict):
        for key in ("data", "train", "examples", "rows"):  # common wrappers
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        raise DataError(Said("data_json_not_list", path=str(path), type=type(data).__name__))
    for i, rec in enumerate(data):
        yield RawRecord(rec, str(path), i)


def _not_json(path: Path, line: int | None = None):
    """``parse_constant`` for :func:`json.loads`: NaN, Infinity and -Infinity are not JSON (Python's reader accepts
    them, and a NaN in a text field would train as the text 'nan'): a :class:`DataError` naming the file."""

    def refuse(word: str):
        at = Said("part_json_line", line=line + 1) if line is not None else None
        raise DataError(Said("data_not_json_constant", path=str(path), line=at, word=word))

    return refuse


def _read_jsonl(path: Path, bad_records: str = "error") -> Iterator[RawRecord]:
    with open(path, encoding=ENCODING) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.rstrip("\r\n"), parse_constant=_not_json(path, i))  # (columns count in the line)
            except (json.JSONDecodeError, RecursionError) as exc:
                why = (
                    Said("part_json_why", error=exc.msg, column=exc.colno)
                    if isinstance(exc, json.JSONDecodeError)
                    else Said("part_json_nested")
                )
                problem = Said("part_jsonl_line_invalid", path=str(path), line=i + 1, why=why)
                if bad_records != "skip":
                    raise DataError(Said("data_jsonl_line_invalid", problem=problem)) from None
                yield RawRecord({}, str(path), i, error=Said("record_jsonl_line_skipped", problem=problem))
                continue
            yield RawRecord(rec, str(path), i)


def _read_tabular(path: Path, kind: str) -> Iterator[RawRecord]:
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        elif kind == "arrow":
            import datasets

            rows = datasets.Dataset.from_file(str(path)).to_list()
        else:
            import csv

            with open(path, encoding=ENCODING, newline="") as f:
                rows = list(csv.DictReader(f))
    except UnicodeDecodeError:
        raise encoding_error(path) from None
    except Exception as exc:  # noqa: BLE001 - any parser failure is a data problem
        raise DataError(Said("data_tabular_unreadable", path=str(path), kind=kind, error=str(exc))) from None
    for i, rec in enumerate(rows):
        yield RawRecord(rec, str(path), i)


def _read_hub(attr: DatasetAttr, cache_dir: str | None) -> list[RawRecord]:
    import datasets

    offline = env_flag("HF_HUB_OFFLINE", False) or env_flag("HF_DATASETS_OFFLINE", False)
    if attr.load_from != "hf_hub":
        source = attr.load_from.replace("_", " ")
        raise DataError(Said("data_hub_other_source", name=attr.name, path=str(attr.path), source=source))
    try:
        ds = datasets.load_dataset(
            attr.path, name=attr.subset, data_dir=attr.folder, split=attr.split, cache_dir=cache_dir
        )
    except Exception as exc:  # noqa: BLE001 - network, auth, missing split...
        state = Said("part_hub_offline") if offline else f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        raise DataError(Said("data_hub_unloadable", name=attr.name, path=str(attr.path), state=state)) from None
    return [RawRecord(rec, f"{attr.path}[{attr.split}]", i) for i, rec in enumerate(ds)]
