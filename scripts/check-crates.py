#!/usr/bin/env python3
"""Checks that the published crates are ready for crates.io (scripts/test-all).

* Exactly the crates below are publishable; every other workspace member says
  `publish = false`.
* Each published crate has a description, licence, repository, readme (a file
  that exists), keywords (1-5), categories, rust-version and docs.rs metadata,
  and each of its path dependencies names a version.
* No crate but sluicegate-server names a global allocator (mimalloc, jemalloc,
  ...), and that one only as an optional dependency (its binary's feature).
* `cargo package --no-verify` packages them together (each resolves the others
  from the packages just made, as `cargo publish` will), and each package holds
  its sources, README and both licence texts, and nothing else (no tests,
  benchmarks or examples, which read files outside the crate), under crates.io's
  10 MB limit. Compiling the packages is the release workflow's job.

Usage: scripts/check-crates.py (from anywhere; runs cargo in the repository).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOCATORS = {"mimalloc", "tikv-jemallocator", "jemallocator", "snmalloc-rs"}
PUBLISHED = [
    "sluicegate",
    "sluicegate-shm",
    "sluicegate-redis",
    "sluicegate-policy",
    "sluicegate-cli",
    "sluicegate-server",
]
REQUIRED_FILES = {"Cargo.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE", "src/lib.rs"}
# Files cargo adds to every package.
CARGO_FILES = {"Cargo.toml.orig", "Cargo.lock", ".cargo_vcs_info.json"}
# Directories a package may ship besides src/: the Redis scripts the crate embeds.
DATA_DIRS = ("src/", "lua/")
MAX_CRATE_BYTES = 10 * 1024 * 1024


def cargo(*args: str) -> str:
    return subprocess.run(["cargo", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def check_metadata(meta: dict, errors: list[str]) -> None:
    members = set(meta["workspace_members"])
    packages = [p for p in meta["packages"] if p["id"] in members]
    publishable = sorted(p["name"] for p in packages if p["publish"] != [])
    if publishable != sorted(PUBLISHED):
        errors.append(f"publishable crates are {publishable}, expected {sorted(PUBLISHED)} (others: publish = false)")
    for p in packages:
        if p["name"] not in PUBLISHED:
            continue
        name = p["name"]
        for field in ("description", "license", "repository", "readme", "rust_version"):
            if not p.get(field):
                errors.append(f"{name}: no {field}")
        if not 1 <= len(p["keywords"]) <= 5:
            errors.append(f"{name}: {len(p['keywords'])} keywords (crates.io takes 1 to 5)")
        if not p["categories"]:
            errors.append(f"{name}: no categories")
        if p.get("readme") and not (Path(p["manifest_path"]).parent / p["readme"]).is_file():
            errors.append(f"{name}: readme {p['readme']} does not exist")
        if not (p.get("metadata") or {}).get("docs", {}).get("rs"):
            errors.append(f"{name}: no [package.metadata.docs.rs]")
        for dep in p["dependencies"]:
            if dep.get("path") and dep["kind"] != "dev" and dep["req"] == "*":
                errors.append(f"{name}: path dependency {dep['name']} has no version")
    # A global allocator is the server binary's choice alone (its optional
    # `mimalloc` feature): a library crate never brings one to its users.
    for p in packages:
        for dep in p["dependencies"]:
            if dep["name"] in ALLOCATORS and (p["name"] != "sluicegate-server" or not dep["optional"]):
                errors.append(f"{p['name']}: depends on the allocator {dep['name']} (only sluicegate-server's binary may, as an optional dependency)")


def check_packages(meta: dict, errors: list[str]) -> None:
    flags = [arg for name in PUBLISHED for arg in ("-p", name)]
    # Together: a crate depending on another of the set resolves it from the
    # package just made, not from crates.io (where it may not exist yet).
    out = subprocess.run(
        ["cargo", "package", "--no-verify", "--allow-dirty", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        errors.append(f"cargo package failed:\n{out.stderr}")
        return
    target = Path(meta["target_directory"])
    versions = {p["name"]: p["version"] for p in meta["packages"]}
    for name in PUBLISHED:
        # --offline: the packaging above brought the index up to date.
        files = set(cargo("package", "--list", "--offline", "--allow-dirty", "-p", name).split())
        for missing in sorted(REQUIRED_FILES - files):
            errors.append(f"{name}: the package has no {missing}")
        for f in sorted(files - REQUIRED_FILES - CARGO_FILES):
            if not f.startswith(DATA_DIRS):
                errors.append(f"{name}: the package ships {f}")
        crate = target / "package" / f"{name}-{versions[name]}.crate"
        size = crate.stat().st_size
        if size > MAX_CRATE_BYTES:
            errors.append(f"{name}: {crate.name} is {size} bytes, over crates.io's limit")
        print(f"{crate.name}: {len(files)} files, {size / 1024:.0f} KiB")


def main() -> int:
    errors: list[str] = []
    meta = json.loads(cargo("metadata", "--no-deps", "--format-version", "1"))
    check_metadata(meta, errors)
    check_packages(meta, errors)
    for e in errors:
        print(f"check-crates: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
