"""Small helpers for the course notebooks: Colab set-up, friendly check verdicts, quiet logs.

``REPO_URL`` is the ONE place the kit's repository address lives. Every notebook's "Open in Colab"
badge and Colab install line must match it (``tests/test_notebooks.py`` checks), so after changing
it, update those two lines in each notebook. The value below is a placeholder until the kit has its
public home.
"""
from __future__ import annotations

import logging
import os
import platform
import sys
import warnings

from specdec_helpers.measure.bench import PA3_PROMPTS
from specdec_helpers.models.toy import TOY_PROMPTS

#: Where the kit lives (placeholder: the course has not published it yet). Badges and the Colab
#: ``pip install git+...`` line must match this constant (checked by tests/test_notebooks.py).
REPO_URL = "https://github.com/specdec-kit/specdec-kit"
#: Branch the Colab badges open and the Colab install pulls.
REPO_BRANCH = "main"
#: Folder of the notebooks inside the repository.
NOTEBOOK_DIR = "notebooks"


def github_path() -> str:
    """``owner/name`` of ``REPO_URL``."""
    return REPO_URL.rstrip("/").split("github.com/", 1)[-1]


def colab_url(notebook: str) -> str:
    """Colab link that opens ``notebook`` (a file name in ``NOTEBOOK_DIR``) straight from GitHub."""
    return f"https://colab.research.google.com/github/{github_path()}/blob/{REPO_BRANCH}/{NOTEBOOK_DIR}/{notebook}"


def colab_badge(notebook: str) -> str:
    """Markdown for the "Open in Colab" badge of ``notebook``."""
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook)})"


def pip_install_spec() -> str:
    """What ``pip install`` needs to get the kit from the repository (Colab's install line)."""
    return f"git+{REPO_URL}@{REPO_BRANCH}"


def in_colab() -> bool:
    """True inside Google Colab (its runtime always has ``google.colab`` importable and imported)."""
    return "google.colab" in sys.modules


def quiet() -> None:
    """Silence the log lines and warnings that transformers/torch print to stderr in notebooks.

    They are harmless here (e.g. generation-flag notices) but would clutter every output and make
    output comparisons (nbval) depend on library versions.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
    logging.getLogger("torch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning, module="transformers")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def setup(threads: int | None = None) -> dict:
    """Run at the top of each notebook: quiet logs, report versions and the accelerator.

    On Colab without a GPU it says how to get one; locally a CPU is fine (the offline ``toy`` pair
    is used). ``threads`` caps torch's CPU threads (``$SPECDEC_THREADS`` by default), which keeps
    timings steadier on shared machines. Returns what it found, as a dict.
    """
    import torch
    import transformers

    quiet()
    _inline_figures()
    threads = threads or int(os.environ.get("SPECDEC_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    info = dict(colab=in_colab(), python=platform.python_version(), torch=torch.__version__,
                transformers=transformers.__version__, gpu=gpu, cpu_threads=torch.get_num_threads())
    where = "Colab" if info["colab"] else "local"
    print(f"{where}: python {info['python']}, torch {info['torch']}, transformers {info['transformers']}")
    if gpu:
        print(f"GPU: {gpu}")
    elif info["colab"]:
        print("No GPU on this Colab runtime. For the hub model pairs choose Runtime > Change runtime type > "
              "T4 GPU, then run this cell again; without one the notebook uses the offline 'toy' pair.")
    else:
        print(f"No GPU: running on the CPU ({info['cpu_threads']} threads) with the offline pairs.")
    return info


def _inline_figures() -> None:
    """``%matplotlib inline`` when running in IPython: figures made with ``Figure()`` (as plots.py
    does) are then shown as images by ``display(fig)``, not as ``<Figure size ...>`` text."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - plain python
        return
    shell = get_ipython()
    if shell is not None and type(shell).__name__ != "TerminalInteractiveShell":
        shell.run_line_magic("matplotlib", "inline")


class CheckFailed(AssertionError):
    """A check cell found a problem; the message says what to fix."""


def check(condition, ok_msg: str, fix_msg: str) -> None:
    """The verdict of a check cell: print ``ok_msg`` if ``condition`` holds, else raise with ``fix_msg``.

    ``condition`` may be a callable, so a check that would crash on unfinished work (e.g. calling a
    function that still raises NotImplementedError) reports that as a friendly failure.
    """
    if callable(condition):
        try:
            condition = condition()
        except NotImplementedError:
            raise CheckFailed(f"Not done yet: the exercise above still raises NotImplementedError. {fix_msg}") from None
    if not condition:
        raise CheckFailed(f"❌ Not yet: {fix_msg}")
    print(f"✅ Correct: {ok_msg}")


def checks(*items) -> None:
    """Several ``(condition, ok_msg, fix_msg)`` checks in a row; stops at the first failure."""
    for item in items:
        check(*item)


def prompts_for(pair, n: int | None = None) -> list[str]:
    """Prompts that suit ``pair``: the toy's own (its corpus is small, so it needs in-domain text),
    else the three PA3 prompts. ``n`` keeps the first ``n``."""
    prompts: list[str] = []
    if getattr(pair, "preset", None) == "toy":
        try:
            prompts = list(TOY_PROMPTS)
        except ImportError:
            prompts = []
    if not prompts:
        prompts = list(PA3_PROMPTS)
    return prompts[:n] if n else prompts


def export_dir(default: str = "report") -> "os.PathLike":
    """Where notebook 05 writes figures and tables: ``$SPECDEC_EXPORT_DIR`` if set (the notebook tests
    point it at a temporary folder), else ``report/`` at the repository root when running inside a
    checkout, else ``./report`` (e.g. on Colab: /content/report)."""
    from pathlib import Path

    if os.environ.get("SPECDEC_EXPORT_DIR"):
        return Path(os.environ["SPECDEC_EXPORT_DIR"])
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and Path.cwd().resolve().is_relative_to(root):
        return root / default
    return Path(default)
