"""The operator page (GET /) in a real headless Chromium, driven through chromedriver by selenium.

The page is read through its DOM: the wave's row and progress bar, the channels table. Any JavaScript error or
console error fails the test.
"""

import json
import os
import re
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By

from conftest import random_token, wait_until

CHROMIUM = os.environ.get("FANFARE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("FANFARE_CHROMEDRIVER", "/usr/bin/chromedriver")
# Where the screenshot of the match goes (scripts/test-external: .build-external/; docs/img/ when refreshing
# the committed one).
SCREENSHOT = os.environ.get("FANFARE_SCREENSHOT")

# Slow enough that the wave runs for seconds, so the page sees it running: 1 connection x 10 streams at
# 10-30 ms per push is at most 1,000 pushes/s.
SLOW_APNS = {"simulator_latency": "uniform:10ms-30ms", "extra": ("--connections", "1", "--streams", "10")}


@pytest.fixture
def browser(folder):
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail(f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian: apt-get install chromium chromium-driver)")
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1440,1200", "--lang=en-US", "--no-first-run", "--disable-extensions",
                     "--disable-background-networking", f"--user-data-dir={os.path.join(folder, 'chromium')}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver_log = os.path.join(folder, "chromedriver.log")
    driver = webdriver.Chrome(options=options, service=DriverService(executable_path=CHROMEDRIVER, log_output=driver_log))
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_problems(driver, allowed_network_statuses=()):
    """SEVERE console entries: script errors, console.error, and failed requests other than the allowed ones."""
    problems = []
    for entry in driver.get_log("browser"):
        if entry["level"] != "SEVERE":
            continue
        if entry.get("source") == "network" and any(
                f"status of {status}" in entry["message"] for status in allowed_network_statuses):
            continue
        problems.append(entry["message"])
    return problems


def requested_urls(driver):
    """The URLs the page requested (from the DevTools Network events in the performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def digits(text):
    """The number a cell shows (its first line: a Failed cell may list the reasons below)."""
    return int(re.sub(r"[^0-9]", "", text.split("\n")[0]))


def wave_row(driver, wave_id):
    rows = driver.find_elements(By.CSS_SELECTOR, f'#recent tr[data-wave-id="{wave_id}"]')
    return rows[0] if rows else None


def row_cells(row):
    cells = row.find_elements(By.CSS_SELECTOR, "th, td")
    names = ["id", "channel", "event", "state", "progress", "targeted", "delivered", "superseded", "failed",
             "other", "first", "makespan"]
    return dict(zip(names, cells))


def row_percent(driver, wave_id):
    row = wave_row(driver, wave_id)
    if row is None:
        return None
    return row.find_element(By.CSS_SELECTOR, ".pct").get_attribute("data-percent")


# Records every live-wave card the page shows, so a card that comes and goes between two looks is not missed.
WATCH_CARDS = """
window.fanfareSeenLive = window.fanfareSeenLive || {};
new MutationObserver(() => {
  for (const card of document.querySelectorAll('#live article.card[data-wave-id]')) {
    const pct = card.querySelector('.pct');
    const seen = window.fanfareSeenLive[card.dataset.waveId] || [];
    if (pct && !seen.includes(pct.dataset.percent)) seen.push(pct.dataset.percent);
    window.fanfareSeenLive[card.dataset.waveId] = seen;
  }
}).observe(document.getElementById('live'), {subtree: true, childList: true, attributes: true, characterData: true});
"""


# Markup rules the page keeps (a few machine-checkable ones): a language, unique ids, labelled form fields,
# tables with captions and header scopes, progress bars with a range and a spoken value, labelled cards.
AUDIT = """
const problems = [];
if (!document.documentElement.lang) problems.push('html has no lang');
const ids = [...document.querySelectorAll('[id]')].map((e) => e.id);
for (const id of new Set(ids)) if (ids.filter((x) => x === id).length > 1) problems.push('duplicate id ' + id);
for (const input of document.querySelectorAll('input')) {
  if (!input.labels || input.labels.length === 0) problems.push('input without a label: ' + input.id);
}
for (const table of document.querySelectorAll('table')) {
  if (!table.caption || !table.caption.textContent.trim()) problems.push('table without a caption: ' + table.id);
  for (const th of table.querySelectorAll('th')) if (!th.scope) problems.push('th without scope in ' + table.id);
}
for (const bar of document.querySelectorAll('[role=progressbar]')) {
  for (const attribute of ['aria-valuemin', 'aria-valuemax', 'aria-valuenow', 'aria-valuetext']) {
    if (!bar.hasAttribute(attribute)) problems.push('progress bar without ' + attribute);
  }
}
for (const card of document.querySelectorAll('article')) {
  const label = document.getElementById(card.getAttribute('aria-labelledby') || '');
  if (!label || !label.textContent.trim()) problems.push('card without a label');
}
for (const section of document.querySelectorAll('section')) {
  if (!document.getElementById(section.getAttribute('aria-labelledby') || '')) problems.push('unlabelled section');
}
return problems;
"""


def register_match(service, channel, update_tokens, push_to_start_tokens=0, unregistered=0):
    """Tokens following `channel`; the last `unregistered` update tokens are ones APNs answers 410 for."""
    items = [{"token": random_token("0410") if i >= update_tokens - unregistered else random_token(), "kind": "update",
              "channels": [channel], "activity_id": f"{channel}-{i}"} for i in range(update_tokens)]
    items += [{"token": random_token(), "kind": "push-to-start", "channels": [channel], "device_id": f"{channel}-device-{i}",
               "attributes_type": "MatchAttributes"} for i in range(push_to_start_tokens)]
    for start in range(0, len(items), 10_000):
        response = service.request("POST", "/v1/tokens", json={"tokens": items[start:start + 10_000]})
        assert response.status_code == 200, response.text


def test_a_running_wave_reaches_100_percent_on_the_page(start_service, browser, folder):
    service = start_service(**SLOW_APNS)
    # A match night: three channels, one finished wave, then a goal on the big match while the page watches.
    register_match(service, "match-42", 4_000, push_to_start_tokens=120, unregistered=40)
    register_match(service, "match-17", 600, push_to_start_tokens=40)
    register_match(service, "match-08", 250)
    finished = service.publish("match-17", content_state={"home": 1, "away": 0, "minute": 23},
                               alert={"title": "Goal", "body": "1-0"})
    # A quick correction on match-08: the second update supersedes the first for tokens it has not reached.
    corrected = service.publish("match-08", content_state={"home": 0, "away": 1, "minute": 12})
    correction = service.publish("match-08", content_state={"home": 0, "away": 0, "minute": 13})
    service.wait_complete(finished)
    service.wait_complete(corrected)
    service.wait_complete(correction)

    browser.get(service.base + "/")
    assert browser.title == "Fanfare operator"
    wait_until(lambda: browser.find_element(By.ID, "ready").text == "ready", 60, "the page to show the service ready")
    wait_until(lambda: row_percent(browser, finished) == "100", 60, "the page to list the finished wave")
    browser.execute_script(WATCH_CARDS)

    running = service.publish("match-42", content_state={"home": 2, "away": 1, "minute": 67},
                              alert={"title": "Goal", "body": "2-1"})
    # The page finds the wave on its next refresh and shows it as a live card while it runs.
    wait_until(lambda: browser.execute_script(f"return (window.fanfareSeenLive['{running}'] || []).length > 0"),
               60, f"a live card for wave {running}")
    # With a live card, the channels and the waves on screen: the markup rules hold.
    assert browser.execute_script(AUDIT) == []
    if SCREENSHOT:
        # Mid-wave if the browser is quick enough; the picture is documentation, not a check.
        wait_until(lambda: int(row_percent(browser, running) or 0) >= 25 or
                   row_percent(browser, running) == "100", 60, "the wave to get going")
        os.makedirs(os.path.dirname(os.path.abspath(SCREENSHOT)), exist_ok=True)
        browser.save_screenshot(SCREENSHOT)

    wait_until(lambda: row_percent(browser, running) == "100", 120, f"wave {running} to reach 100 % on the page")
    report = service.wait_complete(running)
    row = row_cells(wave_row(browser, running))
    wait_until(lambda: row_cells(wave_row(browser, running))["state"].text == "complete", 30,
               "the row to say complete")
    assert report["targeted"] == 4_000
    assert report["accounted"] == report["targeted"]
    assert digits(row["targeted"].text) == report["targeted"]
    assert digits(row["delivered"].text) == report["delivered"]
    assert digits(row["superseded"].text) == report["superseded"]
    assert digits(row["failed"].text) == report["failed"]
    assert digits(row["other"].text) == report["expired"] + report["invalidated"] == 40
    bar = wave_row(browser, running).find_element(By.CSS_SELECTOR, '[role="progressbar"]')
    assert bar.get_attribute("aria-valuenow") == bar.get_attribute("aria-valuemax") == str(report["targeted"])

    # It was seen running (below 100 %), and the page followed it through its event stream.
    seen = browser.execute_script(f"return window.fanfareSeenLive['{running}']")
    assert any(percent != "100" for percent in seen), seen
    assert any(url.endswith(f"/v1/waves/{running}/events") for url in requested_urls(browser))
    # Once complete, the live card is gone.
    wait_until(lambda: not browser.find_elements(By.CSS_SELECTOR, f'#live [data-wave-id="{running}"]'), 30,
               "the live card to go once the wave is complete")

    def channel_rows():
        # Read in one script, so the table cannot change between two reads.
        rows = browser.execute_script("""
            return [...document.querySelectorAll('#channels tbody tr')].map((tr) =>
              [tr.dataset.channel, tr.cells[1].textContent, tr.cells[2].textContent]);""")
        return {channel: (digits(update), digits(push_to_start)) for channel, update, push_to_start in rows}
    # Channels: every match with its audience (match-42 without the 40 tokens APNs called unregistered).
    expected = {"match-42": (3_960, 120), "match-17": (600, 40), "match-08": (250, 0)}
    wait_until(lambda: channel_rows() == expected, 30, f"the channels table to show {expected}")

    # The superseded wave's row has the report's counts.
    superseded = service.wave(corrected)
    cells = row_cells(wave_row(browser, corrected))
    assert (digits(cells["delivered"].text), digits(cells["superseded"].text)) == (
        superseded["delivered"], superseded["superseded"])

    assert console_problems(browser) == []


def test_the_page_asks_for_an_api_key_and_uses_it(start_service, browser):
    reader = "reader-" + random_token()[:24]
    publisher = "publisher-" + random_token()[:24]
    service = start_service(api_keys={reader: "read", publisher: "register,publish"})
    service.key = publisher
    register_match(service, "match-9", 50)
    wave = service.publish("match-9")
    service.key = reader
    service.wait_complete(wave)

    browser.get(service.base + "/")
    panel = browser.find_element(By.ID, "key-panel")
    wait_until(panel.is_displayed, 30, "the page to ask for an API key")

    # A key without the read scope: the page says so and keeps asking.
    browser.find_element(By.ID, "key-input").send_keys(publisher)
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(lambda: "read scope" in browser.find_element(By.ID, "key-why").text, 30,
               "the page to say the key lacks the read scope")
    assert panel.is_displayed()

    browser.find_element(By.ID, "key-input").send_keys(reader)
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(lambda: row_percent(browser, wave) == "100", 30, "the page to show the wave with the read key")
    assert not panel.is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('fanfare.apiKey')") == reader
    # The key is sent as the API expects it, and never put in a URL.
    assert not any(reader in url for url in requested_urls(browser))

    browser.find_element(By.ID, "forget").click()
    wait_until(panel.is_displayed, 30, "the page to ask again once the key is forgotten")
    assert browser.execute_script("return sessionStorage.getItem('fanfare.apiKey')") is None
    # The page's own requests without a key are refused (401/403 are logged by Chromium as failed loads).
    assert console_problems(browser, allowed_network_statuses=(401, 403)) == []
