"""The admin screenshots of the docs (docs/img/admin-*.png), from the example shop in a real browser.

``make screenshots`` (``python scripts/screenshots.py docs/img``): a fresh SQLite shop in a
temporary folder, ``shopdemo`` enqueues and drains its orders (a few fail for good, some are
retried), ``runserver`` serves the example's admin, and headless Chromium (Selenium; Debian's
chromium and chromium-driver, scripts/system-deps.sh) logs in at 1,400 x 900 and takes:

* ``admin-changelist.png``: the orders, filtered to the failed ones (README.md);
* ``admin-dashboard.png``: the Orders queue's dashboard;
* ``admin-dashboard-charts.png``: its per-minute charts.

Run from the repository's root with the dev virtualenv's Python (it has Selenium and the example's
dependencies). Nothing is written outside the temporary folder and the target folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "example_project"
WIDTH, HEIGHT = 1400, 900
USER, PASSWORD = "operator", "screenshots-only"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=EXAMPLE, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(env: dict[str, str]) -> Iterator[str]:
    """``runserver`` (DEBUG: it serves the admin's static files) until the shots are taken."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("runserver did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        raise SystemExit("needs chromium and chromium-driver (scripts/system-deps.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        # The page's own size, not the window's (a window's frame differs between builds).
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.implicitly_wait(5)
        yield driver
    finally:
        driver.quit()


def take(target: Path) -> list[Path]:
    from selenium.webdriver.common.by import By

    work = Path(tempfile.mkdtemp(prefix="dbqueue-screenshots-"))
    try:
        env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{work / 'shop.sqlite3'}",
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        manage(env, "migrate", "-v0")
        print(manage(env, "shopdemo", "--orders", "1000").strip())
        manage(env, "createsuperuser", "--noinput", "--username", USER, "--email", "op@example.com")
        written = []
        with server(env) as url, chromium(work / "profile") as browser:
            browser.get(f"{url}/admin/login/?next=/admin/shop/order/")
            browser.find_element(By.NAME, "username").send_keys(USER)
            browser.find_element(By.NAME, "password").send_keys(PASSWORD)
            browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
            browser.find_element(By.ID, "result_list")

            browser.get(f"{url}/admin/shop/order/?queue_state__exact=failed")
            browser.find_element(By.ID, "result_list")
            written.append(shot(browser, target / "admin-changelist.png"))

            browser.get(f"{url}/admin/shop/order/dbqueue/dashboard/")
            browser.find_element(By.ID, "content")
            written.append(shot(browser, target / "admin-dashboard.png"))
            charts = browser.find_elements(By.CSS_SELECTOR, "svg.dbqueue-chart")
            if charts:
                browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", charts[0])
            written.append(shot(browser, target / "admin-dashboard-charts.png"))
        return written
    finally:
        shutil.rmtree(work, ignore_errors=True)


def shot(browser: Any, path: Path) -> Path:
    time.sleep(0.3)  # the filters' and charts' scripts have run; nothing animates
    if not browser.save_screenshot(str(path)):
        raise SystemExit(f"no screenshot for {path}")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("target", type=Path, nargs="?", default=ROOT / "docs" / "img")
    target = parser.parse_args().target.resolve()
    target.mkdir(parents=True, exist_ok=True)
    take(target)


if __name__ == "__main__":
    main()
