#!/usr/bin/env python3
"""Check the built sdists and wheels of the five Matchbox distributions (stdlib only).

Usage: python tools/check_wheels.py DIST_DIR

DIST_DIR holds what `python -m build` made for every folder under packages/ (tox -e wheels
builds them). For each distribution this checks that

- the wheel holds only its own part of the shared `matchbox` namespace (only matchbox-core
  ships `matchbox/__init__.py`; no wheel carries a sibling's subpackage), its `py.typed`, and
  metadata with version 0.1.0 and no local-path dependency;
- the sdist holds pyproject.toml, README.md, CHANGELOG.md and the `py.typed`;
- its metadata declares torch (every distribution imports it);
- installed alone into a fresh virtual environment (siblings found only in DIST_DIR through
  --find-links, torch pinned by constraints/torch-cpu.txt), it pulls exactly its declared
  sibling distributions, imports, and reports version 0.1.0, while the subpackages of the
  distributions it does not depend on stay absent; `from matchbox import *` works there
  and `matchbox.__version__` is matchbox-core's installed version.

torch (with its own dependencies) is installed once, into a folder every fresh environment
sees through a .pth file, as a system-wide torch would be seen: pip finds the requirement
satisfied there instead of unpacking torch's ~15,000 files five times, which took most of
this check's time. What torch does not cover stays each environment's own: the matchbox
distributions, gast/astor, and anything a wheel pulls in that it should not.

Prints one block per distribution and exits non-zero when any check fails.
"""

from __future__ import annotations

import json
import re
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
    # The shared torch folder would hide a missing torch requirement from the install check.
    names = {re.split(r"[\s;<>=!~(\[]", line.split(":", 1)[1].strip())[0].lower()
             for line in requires}
    check("torch" in names, "METADATA does not require torch")
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


def install_shared_torch(folder: Path) -> str:
    """torch and its dependencies, pinned by the constraints, installed into ``folder``;
    returns the version installed."""
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target",
         str(folder), "-c", str(CONSTRAINTS), "torch"], cwd=folder.parent)
    versions = [p.name.removesuffix(".dist-info").split("-")[1]
                for p in folder.glob("torch-*.dist-info")]
    check(len(versions) == 1, f"expected one torch in {folder}, found {versions}")
    return versions[0]


def fresh_venv(env: Path, shared_torch: Path) -> Path:
    """A new virtual environment that sees ``shared_torch`` on its path; its python."""
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               cwd=env).strip()
    (Path(site) / "shared_torch.pth").write_text(f"{shared_torch}\n")
    return python


def check_install(dist: str, wheel: Path, dist_dir: Path, work: Path,
                  shared_torch: Path) -> list[str]:
    import_name, siblings = DISTRIBUTIONS[dist]
    python = fresh_venv(work / "venv", shared_torch)
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
    check("torch" not in installed, "installed its own torch beside the shared one")
    absent = [DISTRIBUTIONS[d][0] for d in DISTRIBUTIONS if d not in expected]
    absent += sorted(OPTIONAL_THIRD_PARTY - THIRD_PARTY.get(dist, set()))
    where = run([str(python), "-c", IMPORT_CHECK, import_name, dist, VERSION, *absent], cwd=work)
    pulled = ", ".join(sorted(expected - {dist})) or "no sibling"
    return [
        f"{wheel.name} alone pulled {pulled} from the dist folder",
        where.strip() + f"; absent: {', '.join(absent) or '-'}",
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    dist_dir = Path(argv[0]).resolve()
    failures = []
    shared = tempfile.TemporaryDirectory(prefix="shared-torch-")
    shared_torch = Path(shared.name) / "site"
    print(f"torch {install_shared_torch(shared_torch)}, shared by the fresh environments",
          flush=True)
    for dist in DISTRIBUTIONS:
        print(f"== {dist}", flush=True)
        try:
            wheel = one_file(dist_dir, f"{normalized(dist)}-{VERSION}-*.whl")
            print(f"   wheel   {wheel.name}: {check_wheel(dist, wheel)}", flush=True)
            sdist = one_file(dist_dir, f"{normalized(dist)}-{VERSION}.tar.gz")
            print(f"   sdist   {sdist.name}: {check_sdist(dist, sdist)}", flush=True)
            with tempfile.TemporaryDirectory(prefix=f"{dist}-") as tmp:
                install, imported = check_install(dist, wheel, dist_dir, Path(tmp),
                                                  shared_torch)
            print(f"   install {install}", flush=True)
            print(f"   import  {imported}", flush=True)
            print("   ok", flush=True)
        except Failed as exc:
            print(f"   FAILED: {exc}", flush=True)
            failures.append(dist)
    shared.cleanup()
    if failures:
        print(f"\nwheel checks failed for: {', '.join(failures)}")
        return 1
    print(f"\nall {len(DISTRIBUTIONS)} distributions build, install alone and import")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
