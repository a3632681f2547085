"""Small helpers for the course notebooks: Colab set-up, friendly check verdicts, quiet logs.

The "Open in Colab" badge and the Colab install line of every notebook are built from a repository
URL by `colab_badge` and `pip_install_spec`. ``release --repo-url URL`` writes them for the student
repository (the one Colab must install from: never the instructor's, which holds the solutions);
``assignment/authoring/notebook_sync.py`` checks and fixes them. ``REPO_URL`` is only the default, a placeholder.
"""

from __future__ import annotations

import linecache
import logging
import os
import platform
import sys
import warnings

from specdec_helpers.measure.sweep import PA3_PROMPTS

# Notebooks reach the kit through `sd.` and `nb.` only: nb.benchmarking (05), nb.plots, nb.tables, nb.trees (07),
# nb.widgets.
from specdec_helpers.present import benchmarking, plots, tables, widgets  # noqa: F401
from specdec_helpers.present import tree_lesson as trees  # noqa: F401 - notebook 07 calls it nb.trees
from specdec_helpers.present.benchmarking import export_dir, matches_greedy  # noqa: F401
from specdec_helpers.present.hints import HINTS, hint_text
from specdec_helpers.models.toy import TOY_PROMPTS

#: Default repository (a placeholder): ``release --repo-url`` puts the student repository's URL in
#: the released notebooks' badges and install lines.
REPO_URL = "https://github.com/specdec-kit/specdec-kit"
#: Branch the Colab badges open and the Colab install pulls.
REPO_BRANCH = "main"
#: Folder of the notebooks inside the repository.
NOTEBOOK_DIR = "notebooks"


def github_path(repo_url: str | None = None) -> str:
    """``owner/name`` of a GitHub URL (default ``REPO_URL``); Colab opens notebooks from GitHub only."""
    url = (repo_url or REPO_URL).strip().rstrip("/").removesuffix(".git")
    path = url.split("github.com/", 1)[-1] if "github.com/" in url else ""
    if path.count("/") != 1 or not all(path.split("/")):
        raise ValueError(
            f"not a GitHub repository URL: {url!r}; expected https://github.com/OWNER/NAME "
            "(Colab opens notebooks from GitHub)"
        )
    return path


def colab_url(notebook: str, repo_url: str | None = None, branch: str = REPO_BRANCH) -> str:
    """Colab link that opens ``notebook`` (a file name in ``NOTEBOOK_DIR``) straight from GitHub."""
    return f"https://colab.research.google.com/github/{github_path(repo_url)}/blob/{branch}/{NOTEBOOK_DIR}/{notebook}"


def colab_badge(notebook: str, repo_url: str | None = None, branch: str = REPO_BRANCH) -> str:
    """Markdown for the "Open in Colab" badge of ``notebook``."""
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"({colab_url(notebook, repo_url, branch)})"
    )


def pip_install_spec(repo_url: str | None = None, branch: str = REPO_BRANCH) -> str:
    """What ``pip install`` needs to get the kit from the repository (Colab's install line)."""
    return f"git+https://github.com/{github_path(repo_url)}@{branch}"


#: Modules whose version matters to the kit: if one was imported before the install replaced it, the
#: old code stays loaded until the runtime restarts.
WATCHED = ("torch", "transformers", "tokenizers", "ipywidgets", "numpy", "matplotlib")


def stale_modules() -> list[str]:
    """What an install changed under the running kernel: 'transformers 4.57.1 is loaded, 5.2.0 installed'."""
    from importlib import metadata

    stale = []
    for name in WATCHED:
        module = sys.modules.get(name)
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        loaded = getattr(module, "__version__", None)
        if loaded and _public(loaded) != _public(installed):
            stale.append(f"{name} {loaded} is loaded, {installed} installed")
    return stale


def _public(version: str) -> str:
    """The version without its local label: Colab's torch says ``2.13.0+cu130`` where its metadata says
    ``2.13.0``, and that is one install, not a stale one."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(str(version)).public
    except InvalidVersion:
        return str(version).split("+")[0]


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
    _brief_errors()
    threads = threads or int(os.environ.get("SPECDEC_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    info = dict(
        colab=in_colab(),
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        gpu=gpu,
        cpu_threads=torch.get_num_threads(),
    )
    where = "Colab" if info["colab"] else "local"
    print(f"{where}: python {info['python']}, torch {info['torch']}, transformers {info['transformers']}")
    info["stale"] = stale_modules()
    if info["stale"]:
        print(
            "⚠️ Restart needed: the install replaced packages this runtime had already loaded ("
            + "; ".join(info["stale"])
            + "). Runtime > Restart session, then run the notebook from the top "
            "(the install will not repeat). Red pip lines above about dependency conflicts name Colab's other "
            "packages, not this course's: they are harmless here."
        )
    if gpu:
        print(f"GPU: {gpu}")
    elif info["colab"]:
        print(
            "No GPU on this Colab runtime. For the hub model pairs choose Runtime > Change runtime type > "
            "T4 GPU, then run this cell again; without one the notebook uses the offline 'toy' pair."
        )
    else:
        threads = info["cpu_threads"]
        print(f"No GPU: running on the CPU ({threads} thread{'s' if threads != 1 else ''}) with the offline pairs.")
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


def _brief_errors() -> None:
    """In IPython, say what unfinished or out-of-order work needs: a cell that calls an exercise still
    raising the stub's bare ``raise NotImplementedError()`` says so in one line, naming the exercise,
    instead of a traceback (a failed check is brief anyway: `CheckFailed`); a NameError (a cell run
    before the cell that defines the name, or after a restart) ends with how to run the cells above.
    Both stay errors (Run all stops there; nbval and ``handin`` see them); other errors, the kit's own
    NotImplementedError with a message included, keep their traceback as it is."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - plain python
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((NotImplementedError, NameError), _brief_traceback)


def _brief_traceback(shell, etype, value, tb, tb_offset=None) -> None:
    last = tb
    while last.tb_next is not None:
        last = last.tb_next
    code = last.tb_frame.f_code
    stub = (
        issubclass(etype, NotImplementedError)
        and not value.args
        and linecache.getline(code.co_filename, last.tb_lineno).strip() == "raise NotImplementedError()"
    )
    if stub:
        stb = [
            f"Not done yet: {code.co_name}() above still raises NotImplementedError: write it where it says "
            "# YOUR CODE HERE, run its cell, then run this cell again."
        ]
    elif etype.__name__ == "PartMissing":  # a graded part of an earlier notebook (parts.decoder)
        stb = [f"Not done yet: {value}"]
    else:
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
        if issubclass(etype, NameError):
            first = " (start with the set-up cell at the top)" if value.name in ("nb", "sd", "torch", "pair") else ""
            stb = stb + [
                f"{value}: a cell above that defines it has not run in this session{first} (a restart "
                "forgets everything): Runtime > Run before, then this cell again."
            ]
    shell._showtraceback(etype, value, stb)


class CheckFailed(AssertionError):
    """A check cell found a problem; the message says what to fix."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it: the message alone, not a traceback through the kit."""
        return [str(self)]


def check(condition, ok_msg: str, fix_msg: str = "", *, hint: str | None = None) -> None:
    """The verdict of a check cell: print ``ok_msg`` if ``condition`` holds, else raise with ``fix_msg``
    and, for an exercise, its ``hint`` from `present.hints` (never written in the cell, so a student
    does not read it before trying).

    ``condition`` may be a callable, so a check that would crash on unfinished work (e.g. calling a
    function that still raises NotImplementedError) reports that as a friendly failure.
    """
    if hint is not None and hint not in HINTS:
        hint_text(hint)  # raises: an unknown hint id is the notebook author's mistake, said at once
    if callable(condition):
        try:
            condition = condition()
        except NotImplementedError as error:
            if error.args:  # e.g. an earlier notebook's part is missing: its message names the notebook
                raise CheckFailed(f"Not yet: {error}") from None
            raise CheckFailed(f"Not done yet: the exercise above still raises NotImplementedError. {fix_msg}") from None
    if not condition:
        raise CheckFailed(" ".join(m for m in ("❌ Not yet:", fix_msg, hint and hint_text(hint)) if m))
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
