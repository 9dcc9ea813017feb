"""A real browser (headless Chromium) moderates the queue through the admin.

Screenshots go to ``$DBQUEUE_SCREENSHOTS`` (default: pytest's tmp dir) as
``admin-filtered.png``, ``admin-reprioritise.png``, ``admin-done.png``, and for issue 26
``admin-select-all-confirm.png``, ``admin-whole-day.png`` and ``admin-huge-delay.png``, and for
issue 24 ``admin-dashboard-charts.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from django_dbqueue.states import QueueState
from tests.testapp.models import Ticket

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
        reason="needs Debian's chromium and chromium-driver (scripts/system-deps.sh)",
    ),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="dbqueue-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1500,1100",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    target = Path(os.environ.get("DBQUEUE_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


def test_operator_filters_by_customer_and_date_and_reprioritises(
    live_server: Any, browser: Any, shots: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def wait(condition: Any) -> Any:  # a click starts a navigation; it does not wait for it
        return WebDriverWait(browser, 15).until(condition)

    User.objects.create_superuser("operator", "op@example.com", "s3cret-pass")
    now = timezone.now()
    expected, others = [], []
    for i in range(12):
        customer = 3345 if i % 2 == 0 else 7
        ticket = Ticket.objects.create(subject=f"Order {i} stuck in checkout", customer=customer)
        enqueued = now - timedelta(days=1 if i < 8 else 10)
        state = QueueState.FAILED if i % 3 == 0 else QueueState.READY
        error = (
            "Traceback (most recent call last):\nTimeoutError: payment gateway" if state == "failed" else ""
        )
        Ticket.objects.filter(pk=ticket.pk).update(
            queue_enqueued_at=enqueued,
            queue_state=state,
            queue_last_error=error,
            queue_attempts=3 if error else 0,
        )
        (expected if customer == 3345 and i < 8 else others).append(ticket.pk)
    running = Ticket.objects.create(subject="Order being processed", customer=3345)
    Ticket.objects.filter(pk=running.pk).update(
        queue_state=QueueState.RUNNING, queue_token=99, queue_locked_by="web-1:4242", queue_enqueued_at=now
    )

    browser.get(f"{live_server.url}/admin/login/?next=/admin/testapp/ticket/")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("s3cret-pass")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait(ec.title_contains("Select ticket to change"))

    # a domain field: the search box searches "=customer"
    search = browser.find_element(By.ID, "searchbar")
    search.send_keys("3345")
    search.submit()
    wait(ec.url_contains("q=3345"))

    # a date range on enqueued-at: the last three days
    since = now - timedelta(days=3)
    browser.find_element(By.NAME, "queue_enqueued_at__range__gte_0").send_keys(since.strftime("%Y-%m-%d"))
    browser.find_element(By.NAME, "queue_enqueued_at__range__gte_1").send_keys(since.strftime("%H:%M:%S"))
    form = browser.find_element(By.NAME, "queue_enqueued_at__range__gte_0").find_element(
        By.XPATH, "ancestor::div[contains(@class, 'admindatefilter')]"
    )
    form.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait(ec.url_contains("queue_enqueued_at__range__gte_0"))
    # the customer's tickets of the last three days, and the running one
    wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == len(expected) + 1)
    wait(lambda d: d.execute_script("return document.readyState") == "complete")
    browser.save_screenshot(str(shots / "admin-filtered.png"))

    browser.find_element(By.ID, "action-toggle").click()  # select every row of the page
    Select(browser.find_element(By.NAME, "action")).select_by_value("dbqueue_reprioritize")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    priority = browser.find_element(By.NAME, "priority")
    priority.send_keys("42")
    browser.save_screenshot(str(shots / "admin-reprioritise.png"))
    browser.find_element(By.NAME, "dbqueue_submit").click()

    message = wait(ec.presence_of_element_located((By.CSS_SELECTOR, "ul.messagelist li"))).text
    assert f"{len(expected)} of {len(expected) + 1} selected tickets" in message
    assert "1 running row was left to its worker" in message
    browser.save_screenshot(str(shots / "admin-done.png"))

    assert set(Ticket.objects.filter(queue_priority=42).values_list("pk", flat=True)) == set(expected)
    assert not Ticket.objects.filter(pk__in=others, queue_priority=42).exists()
    assert Ticket.objects.get(pk=running.pk).queue_priority == 0
    assert (shots / "admin-done.png").stat().st_size > 10_000


# -- issue 26: what "select all" touches, whole-day filters, dates a database cannot hold ------


def login(browser: Any, live_server: Any, path: str) -> None:
    """Log in as a superuser and land on ``path``. Returns once the browser has left the login
    page: ``click()`` returns as soon as the form is sent, and the server's password check
    takes a while (PBKDF2). A test that read the page at once read the login page, and ended
    (its teardown emptying the tables) while the server was still logging the user in."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    User.objects.create_superuser("operator", "op@example.com", "s3cret-pass")
    browser.get(f"{live_server.url}/admin/login/?next={path}")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("s3cret-pass")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 60).until(
        lambda driver: (
            "/admin/login/" not in driver.current_url
            and driver.execute_script("return document.readyState") == "complete"
        ),
        message=f"the login did not lead to {path}",
    )


def fill_tickets(n: int, day: Any) -> int:
    """``n`` tickets: a third READY of customer 3345 (enqueued on ``day``, at its start, noon
    and end), the others succeeded, of other days. Returns how many are READY."""
    if n >= 10_000:
        fill_tickets_in_sql(n, day)
        return Ticket.objects.filter(queue_state=QueueState.READY).count()
    rows = []
    for i in range(n):
        if i % 3 == 0:
            moment = day + timedelta(hours=(0, 12, 23)[i % 9 // 3], minutes=59 if i % 9 == 6 else 0)
            rows.append({"subject": f"Order {i}", "customer": 3345, "queue_enqueued_at": moment})
        else:
            rows.append(
                {"subject": f"Order {i}", "customer": 7, "queue_enqueued_at": day - timedelta(days=2)}
            )
    Ticket.queue_queryset().bulk_enqueue(rows, batch_size=5000)
    Ticket.objects.filter(customer=7).update(queue_state=QueueState.SUCCEEDED)
    return Ticket.objects.filter(queue_state=QueueState.READY).count()


#: The same rows as fill_tickets() makes, in one INSERT … SELECT over a sequence of numbers
#: (MariaDB's sequence engine: 300,000 rows in about a second, not 300,000 objects built in Python).
FILL = """
INSERT INTO testapp_ticket (subject, customer, handled, queue_state, queue_priority, queue_run_at,
    queue_attempts, queue_last_error, queue_enqueued_at)
SELECT CONCAT('Order ', seq), CASE WHEN MOD(seq, 3) = 0 THEN 3345 ELSE 7 END, FALSE,
    CASE WHEN MOD(seq, 3) = 0 THEN 'ready' ELSE 'succeeded' END, 0, %s, 0, '',
    CASE WHEN MOD(seq, 3) <> 0 THEN %s WHEN MOD(seq, 9) = 0 THEN %s WHEN MOD(seq, 9) = 3 THEN %s ELSE %s END
FROM seq_0_to_{last}
"""


def fill_tickets_in_sql(n: int, day: Any) -> None:
    moments = [day - timedelta(days=2), day, day + timedelta(hours=12), day + timedelta(hours=23, minutes=59)]
    with connection.cursor() as cursor:
        cursor.execute(FILL.format(last=int(n) - 1), [timezone.now(), *moments])
        cursor.execute("ANALYZE TABLE testapp_ticket")  # the planner's estimates of a full table
        cursor.fetchall()


@pytest.mark.parametrize(
    "n",
    [
        90,
        pytest.param(
            300_000,
            marks=[
                pytest.mark.slow,
                # The example's main database; the admin's pass (PostgreSQL) runs the 90 rows.
                pytest.mark.databases("mysql", reason="300,000 rows: on MariaDB, the example's database"),
                pytest.mark.skipif(
                    "not os.environ.get('DATABASE_URL', 'sqlite').startswith(('mysql', 'mariadb'))",
                    reason="300,000 rows: on MariaDB (make test-mariadb)",
                ),
            ],
        ),
    ],
)
def test_select_all_shows_the_exact_count_that_the_action_changes(
    live_server: Any, browser: Any, shots: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from django_dbqueue.admin.pagination import EstimatedCountPaginator

    def wait(condition: Any) -> Any:
        return WebDriverWait(browser, 60).until(condition)

    if n < 10_000:  # a small table: make its list an estimated one, as a big table's is
        monkeypatch.setattr(EstimatedCountPaginator, "exact_limit", 10)
    day = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    ready = fill_tickets(n, day)
    login(browser, live_server, "/admin/testapp/ticket/?queue_state__exact=ready")
    wait(ec.title_contains("Select ticket to change"))
    count = browser.find_element(By.ID, "dbqueue-count").text
    assert count.startswith(("About", "More than")) and "not counted exactly" in count

    browser.find_element(By.ID, "action-toggle").click()
    question = wait(ec.visibility_of_element_located((By.CSS_SELECTOR, ".actions .question a")))
    assert question.text.startswith("Select all matching tickets (")
    question.click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("dbqueue_reprioritize")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    summary = wait(ec.presence_of_element_located((By.ID, "dbqueue-action-count"))).text
    assert f"This will change exactly {ready:,} tickets" in summary, summary
    browser.find_element(By.NAME, "priority").send_keys("7")
    browser.save_screenshot(str(shots / "admin-select-all-confirm.png"))
    browser.find_element(By.NAME, "dbqueue_submit").click()
    message = wait(ec.presence_of_element_located((By.CSS_SELECTOR, "ul.messagelist li"))).text
    assert f"Set priority 7 on {ready:,} tickets matching the filter." in message
    assert Ticket.objects.filter(queue_priority=7).count() == ready

    # a date without a time: the whole day
    date = day.strftime("%Y-%m-%d")
    for name in ("queue_enqueued_at__range__gte_0", "queue_enqueued_at__range__lte_0"):
        browser.find_element(By.NAME, name).send_keys(date)
    form = browser.find_element(By.NAME, "queue_enqueued_at__range__gte_0").find_element(
        By.XPATH, "ancestor::div[contains(@class, 'admindatefilter')]"
    )
    form.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait(ec.url_contains("queue_enqueued_at__range__lte_0"))
    assert not browser.find_elements(By.ID, "dbqueue-filter-errors")
    shown = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(shown) == min(ready, 100)
    # the day's first page: rows of its start, noon and 23:59 (a "to" of 00:00 would drop the
    # last two), none of two days before
    text = browser.find_element(By.ID, "result_list").text
    assert all(re.search(rf"\bOrder {i}\b", text) for i in (0, 3, 6)), text[:500]
    assert not re.search(r"\bOrder 1\b", text)
    browser.save_screenshot(str(shots / "admin-whole-day.png"))

    # a huge delay: a form error, not a server error
    browser.find_element(By.CSS_SELECTOR, "#result_list tbody tr input.action-select").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("dbqueue_reschedule")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    wait(ec.presence_of_element_located((By.NAME, "delay"))).send_keys("3000000")
    Select(browser.find_element(By.NAME, "unit")).select_by_value("days")
    browser.find_element(By.NAME, "dbqueue_submit").click()
    error = wait(ec.presence_of_element_located((By.CSS_SELECTOR, ".errorlist"))).text
    assert "That delay is too long" in error
    browser.save_screenshot(str(shots / "admin-huge-delay.png"))


def test_the_dashboard_draws_its_charts(live_server: Any, browser: Any, shots: Path) -> None:
    """Issue #24: the charts of the last hour render as SVG in a real browser."""
    from django.core.cache import cache
    from selenium.webdriver.common.by import By

    from django_dbqueue.models import QueueAttempt

    cache.clear()
    now = timezone.now()
    attempts = []
    for minute in range(60):
        for i in range(5 + (minute * 7) % 23):
            finished = now - timedelta(minutes=minute, seconds=i)
            outcome = "failed" if i == 3 and minute % 9 == 0 else "retried" if i == 4 else "succeeded"
            claimed = finished - timedelta(milliseconds=200 + 40 * (minute % 13))
            attempts.append(
                QueueAttempt(
                    model="testapp.Ticket",
                    object_id=str(i),
                    attempt=1,
                    due_at=claimed - timedelta(milliseconds=50 * (minute % 17)),
                    claimed_at=claimed,
                    finished_at=finished,
                    outcome=outcome,
                )
            )
    QueueAttempt.objects.bulk_create(attempts)
    Ticket.objects.bulk_create([Ticket(subject=f"Order {i}") for i in range(30)])
    login(browser, live_server, "/admin/testapp/ticket/dbqueue/dashboard/")
    chart = browser.find_element(By.ID, "dbqueue-chart-throughput")
    assert chart.size["width"] > 400 and chart.size["height"] > 100
    bars = browser.find_elements(By.CSS_SELECTOR, "#dbqueue-chart-throughput rect")
    assert len(bars) >= 60
    assert browser.find_elements(By.CSS_SELECTOR, "#dbqueue-chart-latency polyline")
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "dbqueue-timeline"))
    browser.save_screenshot(str(shots / "admin-dashboard-charts.png"))
