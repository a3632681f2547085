"""Existing text, licensed and offline, for training the feature draft (`eagle`) teacher-forced.

Why: a draft trained on text the target writes pays for generation (~150 tokens/s on 2 cores); the
target's features over text that already exists cost one prefill pass per chunk. The passages:

- CPython's pydoc topics (shipped, `data/pydoc_topics.txt.gz`, PSF License 2);
- docstrings of the standard library modules in `STDLIB_MODULES` (PSF License 2, as Python);
- docstrings of numpy's public functions (BSD-3-Clause); `data/NOTICE` has both licences.

Docstrings depend on the installed versions, so `corpus_meta` records them with the corpus's sha256.
Half of the passages (chosen by a hash of their title) become chat samples through the tokenizer's
chat template, a question as the user turn and the passage as the assistant turn: the instruct model's
usual context. One in `HELD_OUT_EVERY` passages (again by hash) is held out.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys

from specdec_helpers.models.toy import toy_documents

CORPUS_VERSION = 1  # bump when the passages or their formatting change
HELD_OUT_EVERY = 10
PIECE_CHARS = 1200  # a passage is cut at paragraph ends into pieces of about this size
STDLIB_MODULES = (
    "argparse",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "functools",
    "heapq",
    "itertools",
    "json",
    "logging",
    "math",
    "os",
    "pathlib",
    "random",
    "re",
    "shutil",
    "statistics",
    "string",
    "subprocess",
    "textwrap",
    "typing",
)
NUMPY_MAX_CHARS = 300_000  # numpy's docstrings are long: a deterministic share of them
_QUESTIONS = (
    "Explain {} in Python.",
    "What does {} do?",
    "How do I use {}?",
    "Tell me about {}.",
    "Can you document {} for me?",
)


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _docstrings(module_name: str) -> list[tuple[str, str]]:
    """``(qualified name, docstring)`` of a module and its public functions and classes, sorted."""
    module = importlib.import_module(module_name)
    found = [(module_name, inspect.getdoc(module) or "")]
    for name in sorted(dir(module)):
        member = getattr(module, name, None)
        if name.startswith("_") or not (
            inspect.isfunction(member)
            or inspect.isclass(member)
            or inspect.isbuiltin(member)
            or type(member).__name__ == "ufunc"
        ):
            continue
        found.append((f"{module_name}.{name}", inspect.getdoc(member) or ""))
    return [(title, doc) for title, doc in found if len(doc) >= 80]


def passages() -> list[tuple[str, str]]:
    """Every ``(title, text)`` of the corpus, in a fixed order (titles are unique)."""
    out = [(f"Python's {doc.split(chr(10), 1)[0].strip()[:60]!r}", doc.strip()) for doc in toy_documents()]
    for name in STDLIB_MODULES:
        out += _docstrings(name)
    budget = NUMPY_MAX_CHARS
    for title, doc in _docstrings("numpy"):
        if budget > 0 and doc not in {d for _, d in out[-50:]}:  # aliases share docstrings
            out.append((title, doc))
            budget -= len(doc)
    seen, unique = set(), []
    for title, doc in out:
        if title not in seen:
            seen.add(title)
            unique.append((title, doc))
    return unique


def _pieces(text: str) -> list[str]:
    """``text`` cut at paragraph ends into pieces of about `PIECE_CHARS` (a longer paragraph stays whole)."""
    pieces, current = [], ""
    for paragraph in text.split("\n\n"):
        if current and len(current) + len(paragraph) > PIECE_CHARS:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    return pieces + [current] if current else pieces


def is_held_out(title: str) -> bool:
    return _digest("split:" + title) % HELD_OUT_EVERY == 0


def corpus_texts(tokenizer, held_out: bool = False) -> list[str]:
    """The training (or held-out) samples as text: each passage piece plain or as a chat turn pair. A piece
    seen before (docstrings repeat paragraphs) is left out, so no held-out text is also trained on."""
    chat = getattr(tokenizer, "chat_template", None)
    texts, seen = [], set()
    for title, doc in passages():
        as_chat = chat and _digest("chat:" + title) % 2 == 0
        for number, piece in enumerate(_pieces(doc)):
            if piece in seen:
                continue
            seen.add(piece)
            if is_held_out(title) != held_out:
                continue
            if not as_chat:
                texts.append(piece)
                continue
            question = _QUESTIONS[_digest(title) % len(_QUESTIONS)].format(title)
            if number:
                question += " Go on."
            texts.append(
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": question}, {"role": "assistant", "content": piece}], tokenize=False
                )
            )
    return texts


def corpus_chunks(tokenizer, held_out: bool = False, max_tokens: int = 256, max_chunks: int | None = None):
    """Token id lists of at most ``max_tokens`` (a sample's later tokens start new chunks), in order;
    ``max_chunks``: about that many, evenly spread over the corpus (every n-th chunk)."""
    chunks = []
    for text in corpus_texts(tokenizer, held_out):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        chunks += [ids[i : i + max_tokens] for i in range(0, len(ids), max_tokens) if len(ids) - i >= 8]
    return chunks[:: -(-len(chunks) // max_chunks)] if max_chunks else chunks


def corpus_meta(tokenizer) -> dict:
    """What decides the corpus: its version, the packages whose docstrings it reads, its sha256."""
    import numpy

    digest = hashlib.sha256("\x00".join(corpus_texts(tokenizer) + corpus_texts(tokenizer, True)).encode())
    return dict(
        version=CORPUS_VERSION, python=sys.version.split()[0], numpy=numpy.__version__, sha256=digest.hexdigest()
    )
