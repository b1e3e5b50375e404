#!/usr/bin/env python3
"""Checks the file lists of the Python distributions in a directory (scripts/wheel).

Each wheel must hold exactly: every file git tracks under python/pysrc/sluicegate
(the Python side, the `.pyi` stubs, the `py.typed` marker), one compiled
extension `sluicegate/_sluicegate.*.so`, and in its dist-info METADATA, WHEEL,
RECORD, the two licence texts and maturin's SBOM. Anything else (a stray build
file, a cache, a test) or anything missing is an error.

The sdist must hold what a source build needs (the workspace manifest and lock
file, the licence texts, the Python package, the crates the extension links) and
no build output, virtualenv, cache or VCS data.

Usage: scripts/check-dist.py DIST_DIR
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
LICENSES = ("LICENSE-MIT", "LICENSE-APACHE")
EXTENSION = re.compile(r"^sluicegate/_sluicegate\.[A-Za-z0-9_.-]+\.so$")
# Path parts no distribution may contain: build output, environments, caches, VCS.
FORBIDDEN_PARTS = {"target", "dist", ".git", "__pycache__", ".venv", ".venv-build", ".pytest_cache", ".mypy_cache"}
FORBIDDEN_SUFFIXES = (".so", ".pyc", ".whl", ".o", ".a", ".rlib", ".d")


def tracked(prefix: str) -> list[str]:
    """Files git tracks under `prefix` (relative to the repository root)."""
    out = subprocess.run(
        ["git", "ls-files", "--", prefix], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    files = [line for line in out.splitlines() if line]
    if not files:
        raise SystemExit(f"check-dist: git tracks no file under {prefix}")
    return files


def check_wheel(path: Path) -> list[str]:
    errors: list[str] = []
    names = [n for n in zipfile.ZipFile(path).namelist() if not n.endswith("/")]
    dist_info = re.match(r"^(sluicegate-[^-]+)-", path.name)
    assert dist_info, path.name
    info = f"{dist_info.group(1)}.dist-info/"
    expected = {
        "sluicegate/" + PurePosixPath(f).relative_to("python/pysrc/sluicegate").as_posix()
        for f in tracked("python/pysrc/sluicegate")
    }
    expected |= {info + n for n in ("METADATA", "WHEEL", "RECORD")}
    expected |= {info + "licenses/" + n for n in LICENSES}
    for required in ("sluicegate/py.typed", "sluicegate/_sluicegate.pyi", "sluicegate/__init__.py"):
        if required not in expected:
            errors.append(f"{required} is not tracked under python/pysrc: the wheel cannot ship it")
    extensions = [n for n in names if EXTENSION.match(n)]
    if len(extensions) != 1:
        errors.append(f"expected one extension module, found {extensions}")
    sboms = [n for n in names if n.startswith(info + "sboms/") and n.endswith(".cyclonedx.json")]
    allowed = expected | set(extensions) | set(sboms)
    errors += [f"missing: {n}" for n in sorted(expected - set(names))]
    errors += [f"stray file: {n}" for n in sorted(set(names) - allowed)]
    metadata = zipfile.ZipFile(path).read(info + "METADATA").decode()
    for lic in LICENSES:
        if f"License-File: {lic}" not in metadata:
            errors.append(f"METADATA does not name {lic}")
    if "License-Expression: MIT OR Apache-2.0" not in metadata:
        errors.append("METADATA has no License-Expression: MIT OR Apache-2.0")
    return errors


def check_sdist(path: Path) -> list[str]:
    errors: list[str] = []
    with tarfile.open(path) as tar:
        members = [m.name for m in tar.getmembers() if m.isfile()]
    top = {n.split("/", 1)[0] for n in members}
    if len(top) != 1:
        return [f"expected one top-level directory, found {sorted(top)}"]
    (prefix,) = top
    names = {n.split("/", 1)[1] for n in members}
    required = {"pyproject.toml", "PKG-INFO", "Cargo.toml", "Cargo.lock", *LICENSES}
    # maturin lays the Python sources out at pysrc/ beside pyproject.toml.
    required |= {f.removeprefix("python/") for f in tracked("python/pysrc")}
    required |= set(tracked("python/src")) | {"python/Cargo.toml", "python/build.rs"}
    required |= set(tracked("core/src")) | set(tracked("redis/src")) | set(tracked("policy/src"))
    required |= set(tracked("redis/lua"))
    errors += [f"missing: {prefix}/{n}" for n in sorted(required - names)]
    for n in sorted(names):
        parts = set(PurePosixPath(n).parts)
        if parts & FORBIDDEN_PARTS or n.endswith(FORBIDDEN_SUFFIXES):
            errors.append(f"stray file: {prefix}/{n}")
    return errors


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dist = Path(sys.argv[1])
    wheels = sorted(dist.glob("sluicegate-*.whl"))
    sdists = sorted(dist.glob("sluicegate-*.tar.gz"))
    if not wheels or len(sdists) != 1:
        print(f"check-dist: expected wheels and one sdist in {dist}, found {wheels + sdists}", file=sys.stderr)
        return 1
    failed = False
    for path, errors in [(w, check_wheel(w)) for w in wheels] + [(sdists[0], check_sdist(sdists[0]))]:
        size = path.stat().st_size
        if errors:
            failed = True
            print(f"{path.name}: {len(errors)} problem(s)")
            for e in errors:
                print(f"  {e}")
        else:
            print(f"{path.name}: {size / 1e6:.2f} MB, file list as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
