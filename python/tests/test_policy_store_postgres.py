"""sluicegate.Policy.from_store on PostgreSQL (issue 27): readers in this
process follow a domain written by another process (the `sluicegate store
import` command), a create and a delete within 1 s (PostgreSQL notifies them),
keep enforcing the last rules while the server is stopped and report it, and
follow changes again once it is started. Passwords never show in a repr or an
error.

Needs a server: scripts/test-store starts one and sets SLUICEGATE_TEST_POSTGRES_URL,
SLUICEGATE_TEST_POSTGRES_CTL (`stop` / `start`) and SLUICEGATE_CLI (the command).
Without them the module is skipped, unless SLUICEGATE_TEST_POSTGRES_REQUIRED is set."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable

import pytest

from sluicegate import Policy, StoreUnavailable

URL = os.environ.get("SLUICEGATE_TEST_POSTGRES_URL", "")
if not URL:
    if os.environ.get("SLUICEGATE_TEST_POSTGRES_REQUIRED"):
        raise RuntimeError("SLUICEGATE_TEST_POSTGRES_REQUIRED is set but SLUICEGATE_TEST_POSTGRES_URL is not")
    pytest.skip("SLUICEGATE_TEST_POSTGRES_URL is unset (scripts/test-store sets it)", allow_module_level=True)
CTL = os.environ["SLUICEGATE_TEST_POSTGRES_CTL"]
CLI = os.environ["SLUICEGATE_CLI"]


def within(seconds: float, done: Callable[[], bool]) -> float:
    """Seconds until `done()` held; fails the test after `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if done():
            return time.monotonic() - start
        time.sleep(0.002)
    pytest.fail(f"not within {seconds} s")


def matched(p: Policy, rule: str, **attrs: str) -> bool:
    return any(r.name == rule for r in p.check(cost=0, **attrs).rules)


class Domain:
    """A domain of its own in the test database, written by the command."""

    def __init__(self, tmp: str) -> None:
        self.name = f"py-{uuid.uuid4().hex[:12]}"
        self.file = os.path.join(tmp, "rules.toml")

    def put(self, toml: str) -> None:
        with open(self.file, "w") as f:
            f.write(toml)
        subprocess.run(
            [CLI, "store", "import", "--store", URL, "--domain", self.name, "--by", "pytest", self.file],
            check=True,
            capture_output=True,
        )


PER_IP = '[[rule]]\nname = "per-ip"\nkey = ["ip"]\nlimit = "2/hour"\n'
ACME = '[[rule]]\nname = "acme"\nmatch = { tenant = "acme" }\nlimit = "1/hour"\n'


def test_follows_a_create_and_a_delete_within_a_second(tmp_path: object) -> None:
    d = Domain(str(tmp_path))
    d.put(PER_IP)
    p = Policy.from_store(URL, domain=d.name)
    assert p.rules == ("per-ip",)
    assert p.store_reachable is True
    assert p.check(ip="192.0.2.1")
    # Written by another process; timed from when it has committed.
    d.put(PER_IP + ACME)
    took = within(1.0, lambda: matched(p, "acme", tenant="acme"))
    d.put(PER_IP)
    took_delete = within(1.0, lambda: not matched(p, "acme", tenant="acme"))
    # Notified, not polled (every 0.2 s): well under a poll interval.
    assert took < 0.15 and took_delete < 0.15, (took, took_delete)
    assert p.check(ip="192.0.2.1")
    assert not p.check(ip="192.0.2.1"), "the unchanged rule kept its state"
    assert p.reload_count == (2, 0)
    assert p.last_error is None
    p.close()


def test_an_invalid_change_is_never_applied_and_passwords_never_shown(tmp_path: object) -> None:
    d = Domain(str(tmp_path))
    with pytest.raises(subprocess.CalledProcessError) as e:
        d.put('[[rule]]\nname = "a"\nlimit = "5/fortnight"\n')
    assert b"rules.toml:3:12: error: rule `a`: bad limit" in e.value.stderr
    with pytest.raises(ValueError, match=f"domain `{d.name}`"):
        Policy.from_store(URL, domain=d.name)
    # A password in the URL: shown as *** in a repr and in errors.
    with pytest.raises(StoreUnavailable) as refused:
        Policy.from_store("postgres://app:s3cret@127.0.0.1:1/db?connect_timeout=2", domain="d")
    assert "app:***@127.0.0.1" in str(refused.value) and "s3cret" not in str(refused.value)
    d.put(PER_IP)
    with_password = URL.replace("://postgres@", "://postgres:unused-pw@")
    p = Policy.from_store(with_password, domain=d.name)
    assert "postgres:***@" in repr(p) and "unused-pw" not in repr(p)
    p.close()


def test_an_outage_keeps_the_rules_reports_it_and_recovers(tmp_path: object) -> None:
    d = Domain(str(tmp_path))
    d.put(PER_IP)
    p = Policy.from_store(URL, domain=d.name, interval=0.05)
    assert p.check(ip="192.0.2.1")
    subprocess.run([CTL, "stop"], check=True)
    try:
        within(5.0, lambda: p.store_reachable is False)
        assert "unavailable" in (p.last_error or "")
        assert "sluicegate_policy_store_up 0" in p.metrics_text()
        # Still enforcing the last rules, state and all.
        assert p.check(ip="192.0.2.1")
        assert not p.check(ip="192.0.2.1")
    finally:
        subprocess.run([CTL, "start"], check=True)
    within(5.0, lambda: p.store_reachable is True and p.last_error is None)
    assert not p.check(ip="192.0.2.1"), "the state survived the outage"
    d.put(PER_IP + ACME)
    within(1.0, lambda: matched(p, "acme", tenant="acme"))
    p.close()
