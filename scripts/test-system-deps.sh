#!/usr/bin/env bash
# System packages the tests need that pip cannot provide (headless Chromium for the web-board test).
# Installs them once where apt-get is available; a machine without them skips those tests with a reason.
set -u
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi
exit 0
