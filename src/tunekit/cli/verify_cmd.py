"""``tunekit verify EXPORT_DIR [--json] [--strict]``: load an exported folder with plain transformers and check it.

A check that finds problems prints the report and exits 1 (not a raised error: the report is the output); on the
board (``$TUNEKIT_ERROR_FILE`` set) it leaves the keyed error a failed ``tunekit export`` check raises
(``export_verify_failed``, every problem keyed), so the job's line is said in the page's language."""

from __future__ import annotations

import json
import sys

from tunekit.cli.verbs import record_keyed_error
from tunekit.config.problems import Said
from tunekit.errors import ConfigError, ModelError
from tunekit.export.verify import print_report, verify_export

HELP = """usage: tunekit verify EXPORT_DIR [--json] [--strict]

Load EXPORT_DIR with plain transformers and check it: the weight index against the shard files (and the
export_size limit), missing/unexpected keys, shapes and dtypes, the saved chat_template against tunekit's
template, a short greedy generation, and — for a merged LoRA — the logits against base + adapter (max abs
diff < 1e-4 in fp32). The base and adapter folders recorded in tunekit_export.json are found from any folder
(absolute paths, else relative to the export). A check that cannot run (base or adapter gone, a quantized
export) is printed as "skipped: reason" and the result is not called OK.
Exit code 0 when no check found a problem, 1 otherwise; --strict also exits 1 when a check was skipped.
--json prints the report as JSON (skipped checks under "skipped"). A GGUF export (export_format: gguf) is checked
in llama.cpp itself instead: tokens against training's, logits or greedy tokens against transformers within a
stated bound (docs/after-training.md).
"""


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv) or not argv:
        sys.stdout.write(HELP)
        return 0 if argv else 2
    as_json = "--json" in argv
    strict = "--strict" in argv
    paths = [a for a in argv if a not in ("--json", "--strict")]
    if len(paths) != 1:
        raise ConfigError(Said("cli_verify_one_folder"))
    report = verify_export(paths[0])
    if as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    else:
        print_report(report)
    if report["problems"]:  # the board's reason, written as verbs.py writes a raised error's
        record_keyed_error(ModelError(Said("export_verify_failed", path=paths[0], problems=tuple(report["problems"]))))
    return 0 if report["ok"] and not (strict and report.get("skipped")) else 1
