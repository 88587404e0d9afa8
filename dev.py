#!/usr/bin/env python3
"""The two commands for working on Matchbox (standard library only).

    python3 dev.py demo [ARGS...]   run examples/demo.py in .venv, where the five
                                    distributions are installed editable
    python3 dev.py test [ARGS...]   run the tox test matrix (tox.ini) from .venv-tox;
                                    ARGS go to tox, e.g. `-e nn` or `-e core -- -k fromlist`
    python3 dev.py bench [ARGS...]  run every benchmark (benchmarks/run.py) in .venv

Both create their virtual environment on first use and reuse it afterwards; .venv is
reinstalled when a pyproject.toml or the constraints file changes.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
CONSTRAINTS = ROOT / "constraints" / "torch-cpu.txt"
PACKAGES = ["matchbox-core", "matchbox-nn", "matchbox-control", "matchbox-data", "matchbox-packed"]
DEMO_VENV = ROOT / ".venv"
TOX_VENV = ROOT / ".venv-tox"
TOX_REQUIREMENT = "tox>=4,<5"
#: How many tox environments `dev.py test` sets up at once before it runs their tests.
SETUP_AT_ONCE = 3
# Installed beside the packages in .venv: torch warns at import without NumPy; the demo
# draws its loss curve with matplotlib.
DEMO_EXTRAS = ["numpy", "matplotlib"]


def say(message: str) -> None:
    print(f"[dev.py] {message}", flush=True)


def call(*cmd: str | Path) -> None:
    """Run a command from the repository root; stop with its exit status if it fails."""
    code = subprocess.call([str(c) for c in cmd], cwd=ROOT)
    if code != 0:
        say(f"failed (exit {code}): {' '.join(str(c) for c in cmd)}")
        sys.exit(code)


def ensure_venv(path: Path) -> Path:
    """Create the virtual environment at `path` unless it is there; return its python."""
    python = path / "bin" / "python"
    if not python.exists():
        say(f"creating {path.name} with {sys.executable}")
        venv.create(path, with_pip=True, clear=path.exists())
    return python


def install_fingerprint() -> str:
    """Changes whenever what an editable install records could change."""
    digest = hashlib.sha256()
    for source in [CONSTRAINTS, *(ROOT / "packages" / p / "pyproject.toml" for p in PACKAGES)]:
        digest.update(source.read_bytes())
    digest.update(" ".join(DEMO_EXTRAS).encode())
    return digest.hexdigest()


def dev_python() -> Path:
    """The python of .venv, with the five distributions installed editable."""
    python = ensure_venv(DEMO_VENV)
    stamp = DEMO_VENV / ".matchbox-installed"
    fingerprint = install_fingerprint()
    if not stamp.exists() or stamp.read_text() != fingerprint:
        say("installing the five distributions editable into .venv (torch pinned to the CPU build)")
        editable = [arg for p in PACKAGES for arg in ("-e", f"packages/{p}")]
        call(python, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, *DEMO_EXTRAS,
             *editable)
        stamp.write_text(fingerprint)
    else:
        say(".venv is up to date")
    return python


def demo(args: list[str]) -> int:
    python = dev_python()
    say(f"running examples/demo.py {' '.join(args)}".rstrip())
    return subprocess.call([str(python), "examples/demo.py", *args], cwd=ROOT)


def bench(args: list[str]) -> int:
    python = dev_python()
    say(f"running benchmarks/run.py {' '.join(args)}".rstrip())
    return subprocess.call([str(python), "-m", "benchmarks.run", *args], cwd=ROOT)


def test(args: list[str]) -> int:
    tox = TOX_VENV / "bin" / "tox"
    if not tox.exists():
        python = ensure_venv(TOX_VENV)
        say(f"installing {TOX_REQUIREMENT} into .venv-tox")
        call(python, "-m", "pip", "install", "--quiet", TOX_REQUIREMENT)
    if not args:
        # The whole matrix: first set up every environment, three at a time. Setting up is
        # mostly waiting on pip (unpacking torch into each environment, downloading
        # `oldest`'s torch 2.3.1), which the tests, run one environment after the other
        # on every core, would otherwise wait for.
        say(f"setting up the environments, {SETUP_AT_ONCE} at a time")
        code = subprocess.call([str(tox), "run-parallel", "--notest", "--parallel",
                                str(SETUP_AT_ONCE), "--parallel-no-spinner", "--quiet"],
                               cwd=ROOT)
        if code:
            return code
    say(f"running tox {' '.join(args)}".rstrip())
    return subprocess.call([str(tox), *args], cwd=ROOT)


COMMANDS = {"demo": demo, "test": test, "bench": bench}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.version_info < (3, 10):  # noqa: UP036 (dev.py may be started by an older python3)
        say(f"Matchbox needs Python 3.10 or newer; this is {sys.version.split()[0]}")
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
