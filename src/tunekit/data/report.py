"""What preprocessing did to each dataset: every skipped, dropped or truncated sample is counted and named."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class DatasetReport:
    name: str
    records: int = 0  # read from the source (after num_samples and max_samples)
    invalid: int = 0  # records that failed validation and were skipped (bad_records: skip)
    dropped: int = 0  # samples with no trainable tokens left
    truncated: int = 0  # samples cut to cutoff_len (kept)
    kept: int = 0
    invalid_examples: list[str] = field(default_factory=list)
    dropped_sources: list[str] = field(default_factory=list)
    truncated_sources: list[str] = field(default_factory=list)
    sampled: str | None = None  # what dataset_info.json's num_samples selected (data/sampling.py)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DatasetReport:
        return cls(**data)

    def pct(self, n: int) -> str:
        return f"{100.0 * n / self.records:.1f}%" if self.records else "0.0%"


def print_reports(reports: list[DatasetReport], cutoff_len: int, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(stderr=False)
    table = Table(title=f"Preprocessing (cutoff_len {cutoff_len})", title_justify="left")
    for col in ("dataset", "records", "invalid (skipped)", "dropped", "truncated", "kept"):
        table.add_column(col, justify="left" if col == "dataset" else "right")
    for r in reports:
        table.add_row(
            r.name,
            str(r.records),
            f"{r.invalid} ({r.pct(r.invalid)})",
            f"{r.dropped} ({r.pct(r.dropped)})",
            f"{r.truncated} ({r.pct(r.truncated)})",
            str(r.kept),
        )
    console.print(table)
    for r in reports:
        if r.sampled:
            console.print(f"  {r.sampled}", highlight=False)
        for msg in r.invalid_examples[:3]:
            console.print(f"  [yellow]skipped[/] {msg}", highlight=False)
        if r.truncated:
            console.print(
                f"  [yellow]{r.name}: {r.truncated} sample(s) truncated to {cutoff_len} tokens[/], e.g. "
                f"{'; '.join(r.truncated_sources[:3])}. Raise cutoff_len to keep them whole "
                f"(`tunekit data stats` recommends one).",
                highlight=False,
            )
        if r.dropped:  # media samples are never cut (data/processors/media.py): one over cutoff_len is dropped whole
            console.print(
                f"  [red]{r.name}: {r.dropped} sample(s) dropped (no trainable tokens left, or longer than cutoff_len "
                f"{cutoff_len} with media: images, videos and audio are never cut)[/], e.g. "
                f"{'; '.join(r.dropped_sources[:3])}. `tunekit data stats` lists the samples whose media "
                f"alone exceed cutoff_len.",
                highlight=False,
            )


def write_reports(reports: list[DatasetReport], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.to_dict() for r in reports], indent=2, ensure_ascii=False), encoding="utf-8")
