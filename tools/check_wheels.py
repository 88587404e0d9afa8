#!/usr/bin/env python3
"""Check the built sdists and wheels of the five Matchbox distributions (stdlib only).

Usage: python tools/check_wheels.py DIST_DIR

DIST_DIR holds what `python -m build` made for every folder under packages/ (tox -e wheels
builds them). For each distribution this checks that

- the wheel holds only its own part of the shared `matchbox` namespace (only matchbox-core
  ships `matchbox/__init__.py`; no wheel carries a sibling's subpackage), its `py.typed`, and
  metadata with version 0.1.0 and no local-path dependency;
- the sdist holds pyproject.toml, README.md, CHANGELOG.md and the `py.typed`;
- installed alone into a fresh virtual environment (siblings found only in DIST_DIR through
  --find-links, torch pinned by constraints/torch-cpu.txt), it pulls exactly its declared
  sibling distributions, imports, and reports version 0.1.0, while the subpackages of the
  distributions it does not depend on stay absent; `from matchbox import *` works there
  and `matchbox.__version__` is matchbox-core's installed version.

Prints one block per distribution and exits non-zero when any check fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

VERSION = "0.1.0"
ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints" / "torch-cpu.txt"

# distribution -> (import name, sibling distributions it needs, directly or not)
DISTRIBUTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "matchbox-core": ("matchbox", ()),
    "matchbox-nn": ("matchbox.nn", ("matchbox-core",)),
    "matchbox-control": ("matchbox.control", ("matchbox-core",)),
    "matchbox-data": ("matchbox.data", ("matchbox-core",)),
    "matchbox-packed": ("matchbox.packed", ("matchbox-core", "matchbox-nn")),
}
# Third-party distributions that only some distributions may pull in.
THIRD_PARTY = {"matchbox-control": {"gast", "astor"}}
OPTIONAL_THIRD_PARTY = {"gast", "astor", "torchtext"}

# Runs inside the fresh venv: argv = import name, distribution, version, then absent modules.
IMPORT_CHECK = """
import importlib, importlib.metadata, importlib.util, pathlib, sys
name, dist, expected, absent = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
module = importlib.import_module(name)
folder = pathlib.Path(module.__file__).parent
assert pathlib.Path(sys.prefix) in folder.parents, f"{name} imported from {folder}, not the venv"
assert (folder / "py.typed").is_file(), f"no py.typed next to {module.__file__}"
version = importlib.metadata.version(dist)
assert version == expected, f"{dist} reports version {version}, expected {expected}"
present = [m for m in absent if importlib.util.find_spec(m) is not None]
assert not present, f"importable although not declared: {present}"
star = {}
exec("from matchbox import *", star)  # raised ImportError when __all__ named an absent sibling
import matchbox
core = importlib.metadata.version("matchbox-core")
assert matchbox.__version__ == core, f"matchbox.__version__ {matchbox.__version__} != {core}"
print(f"{name} from {folder}")
"""


def normalized(dist: str) -> str:
    return dist.replace("-", "_")


def package_folder(import_name: str) -> str:
    return import_name.replace(".", "/") + "/"


class Failed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def one_file(dist_dir: Path, pattern: str) -> Path:
    found = sorted(dist_dir.glob(pattern))
    check(len(found) == 1, f"expected one {pattern} in {dist_dir}, found {[p.name for p in found]}")
    return found[0]


def check_wheel(dist: str, wheel: Path) -> str:
    import_name, _ = DISTRIBUTIONS[dist]
    own = package_folder(import_name)
    info = f"{normalized(dist)}-{VERSION}.dist-info/"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(info + "METADATA").decode()
    files = [n for n in names if not n.startswith(info)]
    stray = [n for n in files if not n.startswith(own)]
    check(not stray, f"files outside {own}: {stray}")
    if dist == "matchbox-core":
        siblings = [package_folder(DISTRIBUTIONS[d][0]) for d in DISTRIBUTIONS if d != dist]
        swallowed = [n for n in files if n.startswith(tuple(siblings))]
        check(not swallowed, f"holds sibling subpackages: {swallowed}")
    else:
        check("matchbox/__init__.py" not in files, "ships matchbox/__init__.py (core owns it)")
    for required in ("__init__.py", "py.typed"):
        check(own + required in files, f"missing {own}{required}")
    check(f"\nVersion: {VERSION}\n" in metadata, f"METADATA version is not {VERSION}")
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    local = [line for line in requires if " @ " in line or "file:" in line]
    check(not local, f"local-path dependencies in METADATA: {local}")
    return f"{len(files)} files under {own}"


def check_sdist(dist: str, sdist: Path) -> str:
    import_name, _ = DISTRIBUTIONS[dist]
    top = f"{normalized(dist)}-{VERSION}/"
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
    required = ["pyproject.toml", "README.md", "CHANGELOG.md", "PKG-INFO"]
    required.append("src/" + package_folder(import_name) + "py.typed")
    missing = [r for r in required if top + r not in names]
    check(not missing, f"missing from sdist: {missing}")
    return f"{len(names)} entries"


def run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(
            f"`{' '.join(cmd[:4])} ...` exited {proc.returncode}:\n"
            + (proc.stdout + proc.stderr)[-3000:]
        )
    return proc.stdout


def check_install(dist: str, wheel: Path, dist_dir: Path, work: Path) -> list[str]:
    import_name, siblings = DISTRIBUTIONS[dist]
    env = work / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    report = work / "report.json"
    run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",  # byte-compiling all of torch would double the time this takes
            "--find-links",
            str(dist_dir),
            "-c",
            str(CONSTRAINTS),
            "--report",
            str(report),
            str(wheel),
        ],
        cwd=work,
    )
    installed = {}
    for item in json.loads(report.read_text())["install"]:
        installed[item["metadata"]["name"].lower()] = item
    ours = {name for name in installed if name in DISTRIBUTIONS}
    expected = {dist, *siblings}
    check(
        ours == expected,
        f"installed matchbox distributions {sorted(ours)}, expected {sorted(expected)}",
    )
    for name in sorted(ours - {dist}):
        url = installed[name]["download_info"]["url"]
        check(url.startswith(dist_dir.as_uri()), f"{name} came from {url}, not {dist_dir}")
    extra = (installed.keys() & OPTIONAL_THIRD_PARTY) - THIRD_PARTY.get(dist, set())
    check(not extra, f"pulled in undeclared {sorted(extra)}")
    torch = installed.get("torch", {}).get("metadata", {}).get("version", "?")
    absent = [DISTRIBUTIONS[d][0] for d in DISTRIBUTIONS if d not in expected]
    absent += sorted(OPTIONAL_THIRD_PARTY - THIRD_PARTY.get(dist, set()))
    where = run([str(python), "-c", IMPORT_CHECK, import_name, dist, VERSION, *absent], cwd=work)
    pulled = ", ".join(sorted(expected - {dist})) or "no sibling"
    return [
        f"{wheel.name} alone pulled {pulled} from the dist folder, torch {torch}",
        where.strip() + f"; absent: {', '.join(absent) or '-'}",
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    dist_dir = Path(argv[0]).resolve()
    failures = []
    for dist in DISTRIBUTIONS:
        print(f"== {dist}", flush=True)
        try:
            wheel = one_file(dist_dir, f"{normalized(dist)}-{VERSION}-*.whl")
            print(f"   wheel   {wheel.name}: {check_wheel(dist, wheel)}", flush=True)
            sdist = one_file(dist_dir, f"{normalized(dist)}-{VERSION}.tar.gz")
            print(f"   sdist   {sdist.name}: {check_sdist(dist, sdist)}", flush=True)
            with tempfile.TemporaryDirectory(prefix=f"{dist}-") as tmp:
                install, imported = check_install(dist, wheel, dist_dir, Path(tmp))
            print(f"   install {install}", flush=True)
            print(f"   import  {imported}", flush=True)
            print("   ok", flush=True)
        except Failed as exc:
            print(f"   FAILED: {exc}", flush=True)
            failures.append(dist)
    if failures:
        print(f"\nwheel checks failed for: {', '.join(failures)}")
        return 1
    print(f"\nall {len(DISTRIBUTIONS)} distributions build, install alone and import")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
