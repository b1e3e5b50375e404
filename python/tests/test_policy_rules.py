"""Policies from values: ``Rule`` and ``Policy.from_rules`` take every field of a
rule file and go through the file's own validator, so a value is accepted or
rejected as in a file, with the same ``ValueError`` naming the rule and field."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sluicegate import Policy, Rule


def _message(exc: pytest.ExceptionInfo[ValueError]) -> str:
    """The finding without its location (a line for a file, a field for values)."""
    text = str(exc.value)
    return re.sub(r"^(<policy>:\d+:\d+: )?error: rule `r`(, field `[^`]+`)?: ", "", text)


FIELDS: list[tuple[str, dict[str, Any]]] = [
    ('limit = "5/fortnight"', {"limit": "5/fortnight"}),
    ('limit = "0/s"', {"limit": "0/s"}),
    ('limit = "1/s"\nkey = ["IP"]', {"limit": "1/s", "key": ["IP"]}),
    ('limit = "1/s"\nalgorithm = "gcra"', {"limit": "1/s", "algorithm": "gcra"}),
    ('limit = "1/s"\nbackend = "memcached"', {"limit": "1/s", "backend": "memcached"}),
    ('limit = "1/s"\nbackend = "redis"', {"limit": "1/s", "backend": "redis"}),
    ('limit = "1/s"\nmode = "dry"', {"limit": "1/s", "mode": "dry"}),
    ('limit = "1/s"\non_error = "maybe"', {"limit": "1/s", "on_error": "maybe"}),
    ('limit = "1/s"\ncapacity = 0', {"limit": "1/s", "capacity": 0}),
    ('limit = "1/s"\ncapacity = -5', {"limit": "1/s", "capacity": -5}),
    ('limit = "1/s"\nstripes = 4\nkey = ["ip"]', {"limit": "1/s", "stripes": 4, "key": ["ip"]}),
    ('limit = "1/s"\nmax_delay_ms = 100', {"limit": "1/s", "max_delay_ms": 100}),
    ('limit = "1/s"\nmatch = { ip = "10.0.0.300" }', {"limit": "1/s", "match": {"ip": "10.0.0.300"}}),
    ('limit = "1/s"\nmatch = { Tenant = ["a"] }', {"limit": "1/s", "match": {"Tenant": ["a"]}}),
]


@pytest.mark.parametrize(("toml", "fields"), FIELDS)
def test_a_rule_is_rejected_as_in_a_file(toml: str, fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as in_file:
        Policy.from_str(f'[[rule]]\nname = "r"\n{toml}\n')
    with pytest.raises(ValueError) as in_values:
        Policy.from_rules([Rule("r", **fields)])
    assert _message(in_values) == _message(in_file)
    assert str(in_values.value).startswith("error: rule `r`, field `")
    assert "<policy>:" in str(in_file.value)


def test_rules_from_values_check_like_the_file() -> None:
    text = """
[defaults]
capacity = 1000
[[rule]]
name = "login"
match = { path = "/login", method = ["POST", "PUT"] }
key = ["ip"]
limit = "2/minute"
[[rule]]
name = "tenant"
match = { tenant = "*" }
key = ["tenant"]
limit = "3/minute"
algorithm = "fixed_window"
mode = "shadow"
"""
    from_file = Policy.from_str(text)
    from_values = Policy.from_rules(
        [
            Rule("login", match={"path": "/login", "method": ["POST", "PUT"]}, key=["ip"], limit="2/minute"),
            Rule("tenant", match={"tenant": "*"}, key=["tenant"], limit="3/minute", algorithm="fixed_window", mode="shadow"),
        ],
        defaults={"capacity": 1000},
    )
    assert from_values.rules == from_file.rules == ("login", "tenant")
    for p in (from_file, from_values):
        got = [bool(p.check(ip="192.0.2.1", path="/login", method="POST", tenant="acme")) for _ in range(3)]
        assert got == [True, True, False]
        d = p.check(ip="192.0.2.2", path="/login", method="PUT", tenant="acme")
        assert d and [r.name for r in d.rules] == ["login", "tenant"]
        assert d.rules[1].remaining == 0  # the shadow rule counted, denied nothing


def test_defaults_and_redis_are_checked() -> None:
    with pytest.raises(ValueError, match="field `defaults.capacity`: capacity must be 1 to"):
        Policy.from_rules([], defaults={"capacity": 0})
    with pytest.raises(ValueError, match="defaults: unknown field `burst`, expected one of `algorithm`"):
        Policy.from_rules([], defaults={"burst": 5})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="field `redis.url`: the Redis URL must start with"):
        Policy.from_rules([], redis={"url": "http://h"})
    with pytest.raises(ValueError, match="redis: missing field `url`"):
        Policy.from_rules([], redis={"prefix": "p:"})  # type: ignore[typeddict-item]
    with pytest.raises(ValueError, match="field `state.memory`: `64 parsecs` is not a memory size"):
        Policy.from_rules([], state={"memory": "64 parsecs"})
    with pytest.raises(ValueError, match="field `state.memory`: `1024`: the memory must be 64 KiB to 1 TiB"):
        Policy.from_rules([], state={"memory": 1024})
    with pytest.raises(ValueError, match="state: unknown field `size`"):
        Policy.from_rules([], state={"size": "1 MiB"})  # type: ignore[typeddict-unknown-key]
    keyed = [Rule("k", key=["ip"], limit="1/s", capacity=100)]
    assert Policy.from_rules(keyed, state={"memory": "1 MiB"}).check(ip="a")
    assert Policy.from_rules(keyed, state={"memory": 1 << 20}).check(ip="a")
    with pytest.raises(ValueError, match="rule `a`, field `name`: a rule with this name is already defined"):
        Policy.from_rules([Rule("a", limit="1/s"), Rule("a", limit="2/s")])
    p = Policy.from_rules([Rule("a", limit="1/s", algorithm="fixed_window")], defaults={"ipv6_prefix": 48})
    assert p.rules == ("a",)


def test_rule_arguments_are_typed() -> None:
    r = Rule("login", limit="5/minute", key=["ip"])
    assert (r.name, r.limit, repr(r)) == ("login", "5/minute", "Rule(name='login', limit='5/minute')")
    with pytest.raises(TypeError, match="key must be a list of str"):
        Rule("a", limit="1/s", key="ip")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capacity must be an int"):
        Rule("a", limit="1/s", capacity="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be sluicegate.Rule"):
        Policy.from_rules(["not a rule"])  # type: ignore[list-item]
