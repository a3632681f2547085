"""Run course notebooks headless (nbclient) and read their check cells' verdicts: what `selfcheck` does
to show that every check cell passes on the course's own hardware before a course starts.

A notebook runs top to bottom in a fresh kernel with ``SPECDEC_PRESET`` set, as under nbval, in a copy
made in a scratch folder (the notebooks' saved outputs stay as they are). A check cell is a code cell
that calls ``nb.check(`` or ``nb.checks(``; it passed when it printed a ✅ line and raised no error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@dataclass
class NotebookRun:
    name: str
    seconds: float
    checks: list[tuple[str, bool, str]] = field(default_factory=list)  # (cell id, passed, first line of verdict)
    error: str = ""  # an error outside a check cell (the notebook itself broke), or a timeout

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.checks) and all(ok for _, ok, _ in self.checks)


def notebook_paths(selection: str = "all", folder: Path = NOTEBOOKS) -> list[Path]:
    """``"all"``, or comma-separated number prefixes (``"01,03"``), as paths; a prefix that names no
    notebook is a ValueError listing the ones there are."""
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if selection == "all":
        return paths
    chosen = []
    for prefix in (s.strip() for s in selection.split(",") if s.strip()):
        match = [p for p in paths if p.name.startswith(prefix)]
        if not match:
            raise ValueError(
                f"--notebooks {prefix!r}: no notebook starts so; there are {', '.join(p.name[:2] for p in paths)}"
            )
        chosen += match
    return chosen


def output_text(outputs) -> str:
    """What a cell printed: its streams, and an error as ``Name: value``."""
    parts = []
    for out in outputs:
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


def run_notebook(path: Path, preset: str, timeout: float = 600, env: dict | None = None) -> NotebookRun:
    """Execute ``path`` in a fresh kernel (cells may error: each check cell is read on its own)."""
    try:
        import nbclient
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "running notebooks headless needs nbclient, in the grader's packages: "
            "pip install -e '.[grade]' (or pip install -r requirements.txt)"
        ) from None
    import nbformat

    scratch = Path(tempfile.mkdtemp(prefix="specdec-selfcheck-"))
    copy = scratch / path.name
    shutil.copy(path, copy)
    nb = nbformat.read(str(copy), as_version=4)
    saved = {name: os.environ.get(name) for name in ("SPECDEC_PRESET", "SPECDEC_EXPORT_DIR", *(env or {}))}
    os.environ.update({"SPECDEC_PRESET": preset, "SPECDEC_EXPORT_DIR": str(scratch / "export"), **(env or {})})
    start = time.perf_counter()
    run = NotebookRun(path.name, 0.0)
    try:
        client = nbclient.NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
    except Exception as error:  # noqa: BLE001 - a timeout or a dead kernel: said in the row, not raised
        run.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(scratch, ignore_errors=True)
    run.seconds = time.perf_counter() - start
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        text = output_text(cell.get("outputs", []))
        errored = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        if "nb.check(" in cell.source or "nb.checks(" in cell.source:
            line = next(
                (ln for ln in text.splitlines() if "✅" in ln or "❌" in ln or "Error" in ln), text.strip()[:200]
            )
            run.checks.append((cell.get("id", "?"), "✅" in text and not errored, line.strip()[:200]))
        elif errored and not run.error:
            run.error = (
                f"cell {cell.get('id', '?')}: {text.strip().splitlines()[-1][:200] if text.strip() else 'error'}"
            )
    return run
