"""The language switch in headless Chromium: an English page switched to 中文 shows the memory plan, the template
pickers' "(none)" and the sample preview in Chinese, as the page draws them."""

from __future__ import annotations

import json

import pytest

from tests.browser_helpers import board_process, browser_missing, chromium_page, fill_text, open_board

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

if (_reason := browser_missing()) is not None:
    pytest.skip(_reason, allow_module_level=True)


def test_switching_to_chinese_rewords_the_plan_and_the_template_pickers(tmp_path):
    from tunekit.tiny.text import build_tiny_model

    build_tiny_model(tmp_path / "tiny", like="qwen2")
    (tmp_path / "data").mkdir()
    rows = [{"instruction": f"Say hello to {i}", "input": "", "output": f"Hello, {i}!"} for i in range(8)]
    (tmp_path / "data" / "demo.json").write_text(json.dumps(rows))
    (tmp_path / "data" / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}))
    with board_process(tmp_path) as url, chromium_page() as pg:
        open_board(pg, url)
        fill_text(pg, "model_name_or_path", tmp_path / "tiny")
        plan = pg.locator("#tk-plan-out")
        pg.wait_for_function("() => document.querySelector('#tk-plan-out').innerText.includes('component')")
        pg.locator("#tk-lang").get_by_text("中文").click()
        pg.wait_for_function("() => document.querySelector('#tk-plan-out').innerText.includes('组成部分')")
        text = plan.inner_text()
        assert "component" not in text and "parameters" not in text and "可训练参数" in text, text
        pg.locator("#tk-tabs").get_by_role("tab", name="对话").click()
        pg.locator("#tk-chat-template input[role=combobox]").click()
        assert pg.get_by_role("option", name="（无）", exact=True).count() == 1
        assert pg.get_by_role("option", name="(none)", exact=True).count() == 0
