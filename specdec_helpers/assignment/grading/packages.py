"""The grader's children import the grader's own torch, transformers and kit, or grading stops.

A sandboxed child keeps only the kit's view on ``PYTHONPATH`` (`privilege.Jail.env`). Where the grader
found a package through ``PYTHONPATH`` (or a user site), the child imports the machine's own copy
instead: on a GPU machine with transformers 5.17, whose forward drops the ``cache=`` argument into
``**kwargs``, the reference solution scored 10.7/45 and nothing said why. So the grader says what it
imports (`expected`, in ``$SPECDEC_GRADER_PACKAGES``) and the child compares before it grades
(`mismatch`); `sandbox.Child` turns a difference into `PackagesDiffer`, which stops the grading.
"""

from __future__ import annotations

import functools
import importlib
import json
import os

ENV = "SPECDEC_GRADER_PACKAGES"
NAMES = ("torch", "transformers", "specdec_helpers")
FIX = (
    "Install the kit's packages into the Python the grader runs (python -m pip install -e '.[grade]', or the "
    "wheels with pip install), not onto PYTHONPATH: the sandboxed processes that run student code keep only "
    "the kit's own view on PYTHONPATH, so they import that Python's packages."
)


class PackagesDiffer(ImportError):
    """A grader's child imports other packages than the grader: grading it would be silently wrong."""


def describe(name: str) -> dict:
    """``{"version", "path", "real"}`` of the package ``name`` as this process imports it (``version``
    None when it cannot be imported). ``path`` is the folder as found on ``sys.path``, ``real`` with
    links resolved: a sandbox may show a folder at its unresolved path only."""
    try:
        module = importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - a broken install counts as missing: say why
        return {"version": None, "path": f"(cannot import: {type(error).__name__}: {error})"[:300], "real": None}
    folder = os.path.dirname(os.path.abspath(module.__file__ or ""))
    return {"version": str(getattr(module, "__version__", "unknown")), "path": folder, "real": os.path.realpath(folder)}


@functools.lru_cache(maxsize=None)
def _mine() -> dict:
    return {name: describe(name) for name in NAMES}


def expected(kit_folder: str | None = None) -> str:
    """What this process (the grader) imports, as ``$SPECDEC_GRADER_PACKAGES``'s JSON; ``kit_folder``:
    where its child finds the kit instead (the student's view of it, a copy)."""
    mine = dict(_mine())
    if kit_folder is not None:
        mine["specdec_helpers"] = {
            **mine["specdec_helpers"],
            "path": os.path.abspath(kit_folder),
            "real": os.path.realpath(kit_folder),
        }
    return json.dumps(mine)


def mismatch(environ=None) -> str | None:
    """Why this process (a grader's child) must not grade, or None: each of ``NAMES`` it imports from
    another place or in another version than the grader said (``$SPECDEC_GRADER_PACKAGES``; unset: None)."""
    raw = (os.environ if environ is None else environ).get(ENV)
    if not raw:
        return None
    want = json.loads(raw)
    problems = []
    for name, grader in want.items():
        mine = describe(name)
        same_place = mine["path"] == grader["path"] or (mine["real"] is not None and mine["real"] == grader["real"])
        if mine["version"] != grader["version"] or not same_place:
            problems.append(
                f"{name} {mine['version'] or 'missing'} from {mine['path']}, but the grader runs {name} "
                f"{grader['version']} from {grader['path']}"
            )
    if not problems:
        return None
    return (
        "the process that runs student code imports other packages than the grader, so its grade would be "
        "wrong: " + "; ".join(problems) + ". " + FIX
    )


def verify(jail, timeout: float = 300) -> None:
    """Raise `PackagesDiffer` when a process started in ``jail`` (a `privilege.Jail`) imports other packages
    than this one: a few seconds, before minutes of nbval kernels that would run on them."""
    import subprocess
    import sys

    process = jail.popen([sys.executable, "-m", __name__], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = process.communicate(timeout=timeout)
    if process.returncode == 3:
        raise PackagesDiffer(out.strip().splitlines()[-1])
    if process.returncode != 0:
        raise PackagesDiffer(
            f"a process of the sandbox could not check its packages (exit {process.returncode}): "
            f"{out.strip()[-600:]}. {FIX}"
        )


if __name__ == "__main__":
    problem = mismatch()
    print(problem or "same packages as the grader")
    raise SystemExit(3 if problem else 0)
