"""sluicegate.Policy.from_store (issue 27): a policy that follows a domain of a
SQLite rule store. The store is written here with Python's sqlite3 from
another process, as any writer of schema version 1 would (the package has no
write API yet): a rule
created and then deleted is enforced and then gone within 1 s, a change that
does not validate is never applied, an outage keeps the rules and is reported
until the store is back, and a snapshot starts a reader while the store is
down."""

from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

import sluicegate
from sluicegate import Policy, StoreUnavailable

# Schema version 1 of the store (policy/src/store/sqlite.rs, MIGRATIONS[0]): a
# store written by version 1 must stay readable, so this copy is the fixture.
SCHEMA_V1 = """
CREATE TABLE domains (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, settings TEXT NOT NULL,
    settings_version INTEGER NOT NULL, created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, updated_by TEXT NOT NULL
) STRICT;
CREATE TABLE rules (
    domain TEXT NOT NULL REFERENCES domains(name), name TEXT NOT NULL,
    position INTEGER NOT NULL, rule TEXT NOT NULL, version INTEGER NOT NULL,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, updated_by TEXT NOT NULL,
    PRIMARY KEY (domain, name)
) STRICT;
CREATE INDEX rules_in_order ON rules(domain, position, name);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, by TEXT NOT NULL,
    action TEXT NOT NULL, domain TEXT NOT NULL, rule TEXT, before TEXT, after TEXT
) STRICT;
CREATE INDEX audit_by_domain ON audit(domain, id);
PRAGMA user_version = 1;
"""


# The writes run in another process: a second SQLite library in this process
# (Python's own, beside the one compiled into the extension) would share its
# POSIX locks with the extension's, which then takes itself for the file's only
# user, checkpoints and removes the WAL under the other (SQLite's "multiple
# copies of SQLite in one process" hazard). Another process is also how a store
# is written in practice.
WRITE = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
db.execute("PRAGMA journal_mode = WAL")
db.execute("BEGIN IMMEDIATE")
for statement, params in eval(sys.argv[2]):
    db.execute(statement, params)
db.execute("COMMIT")
db.close()
"""


class Writer:
    """Writes rules of one domain from another process, bumping the domain's
    version as the store does."""

    def __init__(self, path: pathlib.Path, domain: str) -> None:
        self.path = path
        self.domain = domain
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.executescript(SCHEMA_V1)
        db.close()
        now = int(time.time() * 1000)
        self._run([("INSERT INTO domains VALUES (?, 0, '{}', 0, ?, ?, 'test')", (domain, now, now))])

    def _run(self, statements: list[tuple[str, tuple[object, ...]]]) -> None:
        subprocess.run([sys.executable, "-c", WRITE, str(self.path), repr(statements)], check=True)

    def _bump(self) -> tuple[str, tuple[object, ...]]:
        return ("UPDATE domains SET version = version + 1 WHERE name = ?", (self.domain,))

    def put(self, rule: dict[str, object]) -> None:
        now = int(time.time() * 1000)
        self._run(
            [
                self._bump(),
                (
                    "INSERT INTO rules SELECT ?, ?, version, ?, version, ?, ?, 'test' FROM domains "
                    "WHERE name = ? ON CONFLICT (domain, name) DO UPDATE SET rule = excluded.rule, "
                    "version = excluded.version",
                    (self.domain, rule["name"], json.dumps(rule), now, now, self.domain),
                ),
            ]
        )

    def delete(self, name: str) -> None:
        self._run([self._bump(), ("DELETE FROM rules WHERE domain = ? AND name = ?", (self.domain, name))])


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Writer]:
    yield Writer(tmp_path / "rules.db", "api")


def url_of(w: Writer) -> str:
    return f"sqlite:{w.path}"


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


def test_follows_a_create_and_a_delete_within_a_second(store: Writer) -> None:
    store.put({"name": "per-ip", "limit": "1/hour", "key": ["ip"]})
    p = Policy.from_store(url_of(store), domain="api")
    assert p.rules == ("per-ip",)
    assert p.store_reachable is True
    assert "from_store" in repr(p)
    assert p.check(ip="192.0.2.1")
    assert not p.check(ip="192.0.2.1")

    store.put({"name": "acme", "limit": "1/hour", "match": {"tenant": "acme"}})
    assert within(1.0, lambda: matched(p, "acme", tenant="acme")) < 1.0
    store.delete("acme")
    assert within(1.0, lambda: not matched(p, "acme", tenant="acme")) < 1.0
    # The unchanged rule kept its state through both reloads.
    assert not p.check(ip="192.0.2.1")
    assert p.reload_count == (2, 0)
    assert p.last_error is None
    assert "sluicegate_policy_store_up 1" in p.metrics_text()


def test_a_change_that_does_not_validate_is_never_applied(store: Writer) -> None:
    store.put({"name": "a", "limit": "1/hour"})
    p = Policy.from_store(url_of(store), domain="api", interval=0.02)
    store.put({"name": "a", "limit": "5/fortnight"})
    within(1.0, lambda: p.last_error is not None)
    assert "rule `a`, field `limit`" in (p.last_error or "")
    assert p.check(path="/")
    assert not p.check(path="/"), "the old rule is still in force"


def test_an_outage_keeps_the_rules_and_is_reported(store: Writer, tmp_path: pathlib.Path) -> None:
    store.put({"name": "a", "limit": "2/hour", "key": ["ip"]})
    p = Policy.from_store(url_of(store), domain="api", interval=0.02)
    away = tmp_path / "away.db"
    os.rename(store.path, away)
    within(1.0, lambda: p.store_reachable is False)
    assert "unavailable" in (p.last_error or "")
    assert "sluicegate_policy_store_up 0" in p.metrics_text()
    assert p.check(ip="192.0.2.1")
    assert p.check(ip="192.0.2.1")
    assert not p.check(ip="192.0.2.1"), "still enforcing the last rules"
    os.rename(away, store.path)
    within(1.0, lambda: p.store_reachable is True and p.last_error is None)
    store.put({"name": "b", "limit": "1/s"})
    within(1.0, lambda: p.rules == ("a", "b"))


def test_a_snapshot_starts_a_reader_while_the_store_is_down(store: Writer, tmp_path: pathlib.Path) -> None:
    snap = tmp_path / "api.json"
    store.put({"name": "a", "limit": "1/hour"})
    Policy.from_store(url_of(store), domain="api", snapshot=snap).close()
    assert snap.exists()
    os.rename(store.path, tmp_path / "away.db")
    with pytest.raises(StoreUnavailable, match="unavailable"):
        Policy.from_store(url_of(store), domain="api")
    p = Policy.from_store(url_of(store), domain="api", snapshot=str(snap))
    assert p.rules == ("a",)
    assert p.store_reachable is False
    assert p.check(path="/")
    assert not p.check(path="/")


def test_bad_arguments_are_value_errors(store: Writer) -> None:
    with pytest.raises(ValueError, match="sslmode `sometimes`"):
        Policy.from_store("postgres://app:s3cret@db/rules?sslmode=sometimes", domain="api")
    with pytest.raises(ValueError, match=r"app:\*\*\*@db") as e:
        Policy.from_store("postgres://app:s3cret@db/rules?sslmode=sometimes", domain="api")
    assert "s3cret" not in str(e.value)
    with pytest.raises(ValueError, match="not a store URL"):
        Policy.from_store("rules.db", domain="api")
    with pytest.raises(ValueError, match="domain `nope`"):
        Policy.from_store(url_of(store), domain="nope")
    with pytest.raises(ValueError, match="interval"):
        Policy.from_store(url_of(store), domain="api", interval=0)
    assert issubclass(StoreUnavailable, sluicegate.BackendError)
