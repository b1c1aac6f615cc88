"""The browser tests' Chromium, tab and page fixtures (tests/test_browser.py and the modules that
import its fixtures). One module, imported as ``tests.browser_session`` by every user, so that its
state is one: pytest imports a test file under a second name (``test_browser``) besides the
``tests.test_browser`` the other modules import."""

from __future__ import annotations

import pytest

from tests.system_packages import CHROMIUM_ARGS, chromium_or_skip

playwright = pytest.importorskip("playwright.sync_api", reason="needs the playwright python package")

# The test process's one Chromium and tab while its browser modules run one after the other (the
# "browser" group of tests/conftest.py, which closes them when the group ends): a launch with
# Playwright's driver costs about 0.9 CPU-s, and a page load in a new tab 4.7-4.9 CPU-s against
# 1.8-2.0 in an open one (bench/bench_browser_load.py, docs/BENCHMARKS.md).
_SHARED: dict = {}


@pytest.fixture(scope="module")
def browser():
    if "browser" not in _SHARED:
        chromium = chromium_or_skip()  # (apt may still be installing it: scripts/test.sh)
        driver = playwright.sync_playwright().start()
        _SHARED["driver"] = driver
        _SHARED["browser"] = driver.chromium.launch(
            executable_path=chromium,
            args=CHROMIUM_ARGS,
        )
    return _SHARED["browser"]


def close_shared_browser() -> None:
    """Close the shared tab, Chromium and Playwright's driver (tests/conftest.py, when the browser
    group ends: another module may start Playwright of its own)."""
    browser, driver = _SHARED.pop("browser", None), _SHARED.pop("driver", None)
    _SHARED.pop("tab", None)
    if browser is not None:
        browser.close()
    if driver is not None:
        driver.stop()


def _new_tab(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 2400}, accept_downloads=True)
    return ctx.new_page()


@pytest.fixture(scope="module")
def tab(browser):
    """The browser group's one tab, in a context of its own (cookies, downloads, cache); at the end of
    each module it is left on a blank page (the module's server stops, and an app page whose server
    is gone keeps trying to reconnect)."""
    holder = _SHARED.setdefault("tab", {"page": _new_tab(browser)})
    yield holder
    if not holder["page"].is_closed():
        holder["page"].goto("about:blank")


@pytest.fixture
def page(browser, tab):
    """The browser group's tab, for one test. Every test starts with a ``goto`` (a new Streamlit session, as
    in a new tab); listeners it adds are removed after it. A new tab per test would cost Chromium a
    renderer process and the app's scripts compiled again: a page load took Chromium 4.7-4.9 CPU-s
    in a new tab and 1.8-2.0 in an open one (bench/bench_browser_load.py, docs/BENCHMARKS.md)."""
    if tab["page"].is_closed():  # a test closed it (or its context: the chained-scoring test)
        tab["page"] = _new_tab(browser)
    pg, added = tab["page"], []

    def on(event, handler):
        added.append((event, handler))
        type(pg).on(pg, event, handler)

    pg.on = on
    pg._ce_app = None  # the test's first _goto loads its page (a new Streamlit session)
    yield pg
    del pg.on
    for event, handler in added:
        pg.remove_listener(event, handler)
