"""Headless Chromium through Selenium, for the tests and benchmarks that need a real browser.

``chromium_driver()`` starts one with a fresh profile and no network chatter, or raises
``ChromiumUnavailable`` saying what is missing (tests turn that into a skip).
"""

from __future__ import annotations

import shutil
import tempfile

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1200,900"]


class ChromiumUnavailable(RuntimeError):
    """Selenium, Chromium or chromedriver is not installed."""


def chromium_driver(env: dict | None = None):
    """``env``: the environment of chromedriver and so of Chromium (``FONTCONFIG_FILE``, say); this process's if
    None."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        raise ChromiumUnavailable(f"selenium is not installed ({exc})") from None
    binary = next((b for b in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if b), None)
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        raise ChromiumUnavailable("chromium and chromedriver must be on PATH "
                                  "(Debian: apt install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="pk-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors, for driver.get_log("browser")
    driver = webdriver.Chrome(service=Service(driver_path, env=env), options=opts)
    quit_ = driver.quit

    def quit_and_clean():
        try:
            quit_()
        finally:
            shutil.rmtree(profile, ignore_errors=True)

    driver.quit = quit_and_clean
    return driver


def chromium_or_skip(env: dict | None = None):
    """:func:`chromium_driver` for a test: without Chromium the test is skipped with the reason, in one line."""
    try:
        return chromium_driver(env)
    except ChromiumUnavailable as exc:
        import pytest  # here, not at the top: the benchmarks use this module without pytest
        pytest.skip(str(exc))
