"""The queue's admin pages look like Django's own on the installed Django (issue 34, item 8).

Django 6.1 draws breadcrumbs as ``<ol class="breadcrumbs"><li>…`` where 5.2 and 6.0 draw
``<div class="breadcrumbs">`` with ``&rsaquo;`` between links, and styles only its own markup. Each
assertion compares the queue's pages with Django's own changelist in the same browser, so the
test holds on every supported Django: the breadcrumbs' element and computed style are the
admin's, and the "Claims are running." notice does not overlap the "Add" button. Screenshots go
to ``$DBQUEUE_SCREENSHOTS`` (default: pytest's tmp dir) as ``admin-layout-*.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.surfaces.admin.test_admin_browser import browser, login, pytestmark, shots  # noqa: F401 - fixtures, marks
from tests.testapp.models import Ticket

CHANGELIST = "/admin/testapp/ticket/"
#: What makes breadcrumbs look like the admin's: its bar, its text, its spacing.
STYLE = (
    "background-color",
    "color",
    "font-size",
    "padding-top",
    "padding-left",
    "display",
    "list-style-type",
)


def box(driver: Any, selector: str) -> dict[str, float]:
    from selenium.webdriver.common.by import By

    element = driver.find_element(By.CSS_SELECTOR, selector)
    assert element.is_displayed(), selector
    return driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};",
        element,
    )


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def breadcrumbs(driver: Any) -> dict[str, Any]:
    """The page's breadcrumbs: tag, computed style, the crumbs' texts, and the links' colour."""
    return driver.execute_script(
        """
        const crumbs = document.querySelector('.breadcrumbs');
        const style = getComputedStyle(crumbs);
        const link = crumbs.querySelector('a');
        return {
          tag: crumbs.tagName,
          style: Object.fromEntries(arguments[0].map(name => [name, style.getPropertyValue(name)])),
          link: getComputedStyle(link).getPropertyValue('color'),
          links: Array.from(crumbs.querySelectorAll('a'), a => a.innerText.trim()),
          // 5.2 and 6.0 write the separators as text, 6.1 draws them with CSS: compare without.
          text: crumbs.innerText.replace(/\u203a/g, ' ').replace(/\\s+/g, ' ').trim(),
          height: crumbs.getBoundingClientRect().height,
        };
        """,
        list(STYLE),
    )


def test_notice_and_breadcrumbs_are_laid_out_as_the_admin_on_this_django(
    live_server: Any, request: pytest.FixtureRequest
) -> None:
    driver: Any = request.getfixturevalue("browser")
    folder: Path = request.getfixturevalue("shots")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    for i in range(3):
        Ticket.objects.create(subject=f"Order {i} stuck", customer=i)
    login(driver, live_server, CHANGELIST)
    WebDriverWait(driver, 15).until(ec.title_contains("Select ticket to change"))
    driver.save_screenshot(str(folder / "admin-layout-changelist.png"))

    # The notice and the "Add" button: both shown, neither over the other; the notice is a row
    # of its own under the object tools (on 6.1 it ran into their row, against "Add").
    notice, add = box(driver, "#dbqueue-pause"), box(driver, ".object-tools a.addlink")
    assert "Claims are running." in driver.find_element(By.ID, "dbqueue-pause").text
    assert not overlap(notice, add), (notice, add)
    for tool in driver.find_elements(By.CSS_SELECTOR, ".object-tools li"):
        rect = driver.execute_script("return arguments[0].getBoundingClientRect().toJSON();", tool)
        assert not overlap(notice, rect), (notice, rect, tool.text)
        assert notice["top"] >= rect["bottom"], (notice, rect, tool.text)
    # ... and it sits above the list's search bar, aligned with it.
    toolbar = box(driver, "#toolbar")
    assert abs(notice["left"] - toolbar["left"]) < 2, (notice, toolbar)
    assert notice["bottom"] <= toolbar["top"] + 1, (notice, toolbar)

    # Django's own changelist draws the admin's breadcrumbs: the reference for ours.
    admin = breadcrumbs(driver)
    assert admin["style"]["background-color"] not in ("rgba(0, 0, 0, 0)", "transparent"), admin

    def same_as_the_admin(page: str, last: str) -> None:
        ours = breadcrumbs(driver)
        assert ours["tag"] == admin["tag"], (page, ours, admin)
        assert ours["style"] == admin["style"], (page, ours, admin)
        assert ours["link"] == admin["link"], (page, ours, admin)
        assert abs(ours["height"] - admin["height"]) < 2, (page, ours, admin)
        assert ours["links"] == ["Home", "Testapp", "Tickets"], (page, ours)
        assert ours["text"] == f"Home Testapp Tickets {last}", (page, ours["text"])

    driver.get(f"{live_server.url}{CHANGELIST}dbqueue/dashboard/")
    WebDriverWait(driver, 15).until(ec.presence_of_element_located((By.ID, "dbqueue-pause")))
    driver.save_screenshot(str(folder / "admin-layout-dashboard.png"))
    same_as_the_admin("dashboard", "Queue dashboard")

    driver.get(f"{live_server.url}{CHANGELIST}dbqueue/mine/")
    WebDriverWait(driver, 15).until(ec.title_contains("My"))
    driver.save_screenshot(str(folder / "admin-layout-mine.png"))
    same_as_the_admin("my items", driver.find_element(By.CSS_SELECTOR, "#content h1").text)

    # An action's confirmation page.
    driver.get(f"{live_server.url}{CHANGELIST}")
    driver.find_element(By.ID, "action-toggle").click()
    Select(driver.find_element(By.NAME, "action")).select_by_value("dbqueue_reprioritize")
    driver.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    WebDriverWait(driver, 15).until(ec.presence_of_element_located((By.ID, "dbqueue-action-form")))
    driver.save_screenshot(str(folder / "admin-layout-action.png"))
    same_as_the_admin("action", driver.find_element(By.CSS_SELECTOR, "#content h1").text)
