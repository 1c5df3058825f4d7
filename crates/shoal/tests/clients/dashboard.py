"""The manager's dashboard in a real headless browser (Debian's chromium
and chromedriver, driven by selenium), as crates/shoal/tests/dashboard.rs
runs it. Environment: URL (the dashboard), ADMIN_KEY (client.admin's key),
RO_ENTITY and RO_KEY (a user with `mon 'allow r'`), STATUS (a file holding
`shoal status --format json`), SHOTS (where screenshots go), OUT (where the
results go, as JSON). Fails (exit 1, with the reason) on any check; the
Rust side then checks the actions took effect in the cluster."""

import json
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

URL = os.environ["URL"].rstrip("/")
SHOTS = os.environ["SHOTS"]
STATUS = json.load(open(os.environ["STATUS"]))
results = {}


def fail(msg):
    print("dashboard check failed: " + msg, file=sys.stderr)
    sys.exit(1)


def until(what, f, secs=20):
    deadline = time.time() + secs
    last = None
    while time.time() < deadline:
        try:
            v = f()
            if v:
                return v
        except Exception as e:  # the page is redrawing: try again
            last = e
        time.sleep(0.2)
    fail(f"{what}: not within {secs} s ({last})")


opts = Options()
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
          "--disable-dev-shm-usage"]:
    opts.add_argument(a)
opts.binary_location = "/usr/bin/chromium"
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def console(expected=()):
    """Console errors since the last call, except those expected (the
    status codes of requests the test makes fail on purpose)."""
    errs = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return [e["message"] for e in errs if not any(x in e["message"] for x in expected)]


def text(id_):
    return driver.find_element(By.ID, id_).text


def shown(id_):
    return driver.find_element(By.ID, id_).is_displayed()


def page(name):
    driver.execute_script(f"location.hash = '#{name}'")
    until(f"page {name}", lambda: shown(f"page-{name}"))


def login(entity, key):
    until("the login form", lambda: shown("login-form"))
    e = driver.find_element(By.ID, "login-entity")
    e.clear()
    e.send_keys(entity)
    k = driver.find_element(By.ID, "login-key")
    k.clear()
    k.send_keys(key)
    driver.find_element(By.ID, "login-submit").click()


def logout():
    driver.find_element(By.ID, "logout").click()
    until("logged out", lambda: shown("login-form"))


def action(body):
    """Posts an action from the page, as the page would: (status, body)."""
    return driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
        fetch('/api/action', {method: 'POST', headers: {'Content-Type': 'application/json'},
               body: JSON.stringify(arguments[0]), credentials: 'same-origin'})
          .then(async r => done([r.status, await r.text()]), e => done([0, String(e)]));""",
        body)


try:
    driver.get(URL + "/")
    until("the login page", lambda: shown("login-form"))
    driver.save_screenshot(os.path.join(SHOTS, "login.png"))
    if console():
        fail(f"console errors on the login page: {console()}")

    # A wrong key is refused with a message.
    login("client.admin", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    until("the refusal", lambda: "wrong entity or key" in text("login-error"))
    console(expected=("401",))

    # A read-only user sees the figures `shoal status` gives, and no action.
    login(os.environ["RO_ENTITY"], os.environ["RO_KEY"])
    until("the dashboard", lambda: shown("app") and text("health-status") not in ("", "…"))
    om, pg = STATUS["osdmap"], STATUS["pgmap"]
    want = {
        "health-status": STATUS["health"]["status"],
        "osd-total": str(om["num_osds"]),
        "osd-up": str(om["num_up_osds"]),
        "osd-in": str(om["num_in_osds"]),
        "pool-count": str(om["num_pools"]),
        "pg-total": str(pg["num_pgs"]),
    }
    for id_, v in want.items():
        until(f"#{id_} = {v}", lambda: text(id_) == v, secs=15)
    results["figures"] = want
    if "(read-only)" not in text("role"):
        fail("the role is not shown as read-only: " + text("role"))
    page("osds")
    until("the OSD rows", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#osd-table tr[data-name^='osd.']")) == om["num_osds"])
    if any(b.is_displayed() for b in driver.find_elements(By.CSS_SELECTOR, "button[data-action]")):
        fail("a read-only user is offered actions")
    page("pools")
    if shown("pool-create"):
        fail("a read-only user is offered the pool form")
    status, body = action({"action": "osd-out", "osd": 0})
    if status != 403:
        fail(f"a read-only user's action answered {status}: {body}")
    results["read_only_action"] = [status, body]
    status, body = action({"action": "osd-scrub", "osd": 0})
    if status != 403:
        fail(f"a read-only user's scrub answered {status}: {body}")
    results["read_only_scrub"] = [status, body]
    errs = console(expected=("403",))
    if errs:
        fail(f"console errors for the read-only user: {errs}")
    logout()

    # An admin acts: an OSD out, then a pool created, through the forms.
    login("client.admin", os.environ["ADMIN_KEY"])
    until("the admin dashboard", lambda: shown("app") and "(admin)" in text("role"))
    page("overview")
    until("the charts", lambda: driver.find_element(By.CSS_SELECTOR, "#chart-ops path.write").get_attribute("d"))
    time.sleep(2.5)  # one more refresh with the history
    driver.save_screenshot(os.path.join(SHOTS, "overview.png"))
    page("pgs")
    until("the PG states", lambda: driver.find_elements(By.CSS_SELECTOR, "#pg-states tr[data-state]"))
    driver.save_screenshot(os.path.join(SHOTS, "pgs.png"))
    page("osds")
    scrub = until("the scrub button", lambda: driver.find_element(
        By.CSS_SELECTOR, "#osd-table tr[data-name='osd.0'] button[data-action='osd-scrub']"))
    scrub.click()
    until("the scrub notice", lambda: "scrub started" in text("notice"), secs=40)
    results["scrubbed"] = text("notice")
    target = f"osd.{om['num_osds'] - 1}"
    button = until("the mark-out button", lambda: driver.find_element(
        By.CSS_SELECTOR, f"#osd-table tr[data-name='{target}'] button[data-action='osd-out']"))
    button.click()
    until(f"{target} out on the page", lambda: ", out" in driver.find_element(
        By.CSS_SELECTOR, f"#osd-table tr[data-name='{target}'] td:nth-child(3)").text)
    results["marked_out"] = target
    driver.save_screenshot(os.path.join(SHOTS, "osds.png"))
    page("pools")
    form = driver.find_element(By.ID, "pool-create")
    form.find_element(By.NAME, "pool").send_keys("dashboard-pool")
    pg_num = form.find_element(By.NAME, "pg_num")
    pg_num.clear()
    pg_num.send_keys("8")
    size = form.find_element(By.NAME, "size")
    size.clear()
    size.send_keys(str(min(3, om["num_osds"])))
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until("the new pool listed", lambda: driver.find_elements(
        By.CSS_SELECTOR, "#pool-table tr[data-pool='dashboard-pool']"), secs=30)
    results["pool_created"] = "dashboard-pool"
    driver.save_screenshot(os.path.join(SHOTS, "pools.png"))
    page("storage")
    until("the image listed", lambda: driver.find_elements(
        By.CSS_SELECTOR, "#image-table tr[data-image='rbd/dashboard-disk']"), secs=60)
    until("the bucket listed", lambda: driver.find_elements(
        By.CSS_SELECTOR, "#bucket-table tr[data-bucket='dashboard-bucket']"), secs=60)
    results["catalog"] = True
    driver.save_screenshot(os.path.join(SHOTS, "storage.png"))
    errs = console()
    if errs:
        fail(f"console errors for the admin: {errs}")
    results["ok"] = True
finally:
    with open(os.environ["OUT"], "w") as f:
        json.dump(results, f)
    driver.quit()
