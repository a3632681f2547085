"""What each student's jail is made of, decided once per process: which layers (``$SPECDEC_SANDBOX`` and what
works on this machine; `privilege`'s doc says what each layer does), the limits on each of the student's
processes and the environment variables that pass into them."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from specdec_helpers.assignment.grading.isolation import bwrap_works
from specdec_helpers.assignment.grading.student_users import USER, ensure_user

PASS_ENV = (
    "SPECDEC_PRESET",
    "SPECDEC_DTYPE",
    "SPECDEC_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "LANG",
    "LC_ALL",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "CUDA_VISIBLE_DEVICES",
    # where hub presets' models are: the student's user must be able to read that folder (bubblewrap
    # does not show it yet: grading a hub preset in bubblewrap needs it bound, see the README)
    "HF_HOME",
    "HF_HUB_CACHE",
)


@dataclass(frozen=True)
class Limits:
    """Per-process limits on a student's code (``processes`` counts all of the student user's)."""

    processes: int = 256  # RLIMIT_NPROC (threads count too)
    memory: int | None = None  # RLIMIT_AS in bytes; None: half the machine's memory, unlimited when CUDA is used
    cpu_seconds: int = 3600  # RLIMIT_CPU: a process left spinning dies even if the grader never comes back
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE

    def resolved(self) -> dict:
        memory = self.memory
        if memory is None and not _cuda():  # CUDA reserves far more address space than memory: no limit there
            memory = max(4 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
        return {"NPROC": self.processes, "AS": memory, "CPU": self.cpu_seconds, "FSIZE": self.file_bytes}


def _cuda() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def layers() -> tuple[bool, bool]:
    """``(user, bwrap)``: which layers this process uses (see `privilege`'s doc)."""
    choice = os.environ.get("SPECDEC_SANDBOX", "auto")
    if choice not in ("auto", "user", "bwrap", "none"):
        raise ValueError(f"SPECDEC_SANDBOX must be auto, user, bwrap or none, got {choice!r}")
    root = os.geteuid() == 0
    if choice == "none":
        return False, False
    if choice == "user" and not root:
        raise ValueError("SPECDEC_SANDBOX=user needs the grader to run as root")
    if root:
        ensure_user(USER)
    if choice == "bwrap" and not bwrap_works():
        raise ValueError("SPECDEC_SANDBOX=bwrap, but bubblewrap is not installed or cannot make namespaces here")
    return root, choice != "user" and bwrap_works()


def describe() -> str:
    user, bwrap = layers()
    parts = (["as an unprivileged user"] if user else []) + (["in a bubblewrap sandbox"] if bwrap else [])
    return "student code runs " + (" and ".join(parts) if parts else "with the grader's rights")
