"""Regenerate docs/options.md from the config schema (a test fails when it is stale)."""

from pathlib import Path

from tunekit.config.options_doc import render_options_markdown

if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "docs" / "options.md"
    path.write_text(render_options_markdown() + "\n", encoding="utf-8")
    print(f"wrote {path}")
