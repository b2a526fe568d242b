#!/usr/bin/env bash
# System packages the tests need that pip cannot provide: headless Chromium for the web-board tests, and a CJK font
# so that the Chinese board's screenshots (test-artifacts/webui/) are legible (the tests read the page's text).
# Installs them once where apt-get is available; a machine without Chromium skips those tests with a reason.
set -u
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
fc-list :lang=zh 2>/dev/null | grep -q . || missing+=(fonts-wqy-microhei)
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
        || echo "warning: could not install ${missing[*]}; browser tests may be skipped" >&2
fi
exit 0
