"""Every hub preset's load path, run offline on a synthesized Hugging Face cache (issue 26, item 2).

`hub_cache.build_hub_cache` writes tiny random models under the presets' real repository ids, laid out
as the hub client lays out its cache; with ``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` pointing there, each
path a student or grader takes loads them as it would load a download: `load_pair`, the notebooks'
set-up cell, ``SpeculativeDecoder(target_name, draft_name)`` (stand-ins and the reference solution), and
the grader's child processes. Each decodes equal to the target's greedy decoding.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import specdec_helpers as sd
from hub_cache import build_hub_cache, family_of
from specdec_helpers.models.presets import get_preset

HUB_PRESETS = [row["name"] for row in sd.list_presets() if not row["offline"]]
# The fast tier loads one preset per family (the family is what a tiny cache model copies); the other
# Pythia pairs, same family under other repository ids, run in the slow tier.
ONE_PER_FAMILY = list({family_of(get_preset(name).target): name for name in reversed(HUB_PRESETS)}.values())
PRESET_TIERS = [name if name in ONE_PER_FAMILY else pytest.param(name, marks=pytest.mark.slow) for name in HUB_PRESETS]
N_NEW = 24


@pytest.fixture(scope="session")
def hub_cache_dir(tmp_path_factory) -> Path:
    """The synthesized cache, built once per test session (about 5-10 s)."""
    home = tmp_path_factory.mktemp("hf_home")
    repo_ids = {x for name in HUB_PRESETS for x in (get_preset(name).target, get_preset(name).draft)}
    build_hub_cache(home / "hub", repo_ids)
    return home / "hub"


@pytest.fixture
def offline_hub(hub_cache_dir, monkeypatch) -> Path:
    """HF_HUB_OFFLINE=1 and HF_HOME/HF_HUB_CACHE on the synthesized cache, for this process (huggingface_hub
    read its settings at import: patched there too) and for child processes (the environment)."""
    import huggingface_hub.constants as constants

    home = hub_cache_dir.parent
    for name, value in {"HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "HF_HUB_CACHE": str(hub_cache_dir)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache_dir))
    return hub_cache_dir


def _greedy(model, ids, n=N_NEW):
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=n,
        pad_token_id=model.generation_config.pad_token_id,
    )


def test_the_cache_reads_back_as_a_hub_cache(offline_hub):
    """huggingface_hub's own cache scanner sees every repository with a `main` revision and its files."""
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(offline_hub)
    assert not info.warnings, info.warnings
    repos = {r.repo_id: r for r in info.repos}
    for name in HUB_PRESETS:
        for repo_id in (get_preset(name).target, get_preset(name).draft):
            revision = next(iter(repos[repo_id].revisions))
            assert "main" in revision.refs
            assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= {
                f.file_name for f in revision.files
            }


def test_every_hub_preset_has_a_family():
    assert HUB_PRESETS, "list_presets() lists no hub preset"
    for name in HUB_PRESETS:
        family_of(get_preset(name).target), family_of(get_preset(name).draft)


@pytest.mark.parametrize("preset", PRESET_TIERS)
def test_load_pair_decodes_equal_to_greedy(offline_hub, preset):
    pair = sd.load_pair(preset, device="cpu", progress=False)
    assert pair.preset == preset and isinstance(pair.draft, torch.nn.Module)
    ids = pair.encode("The quick brown fox")
    out = sd.speculative_decode(
        pair.target,
        pair.draft,
        ids,
        max_new_tokens=N_NEW,
        num_speculative_tokens=pair.num_speculative_tokens,
        eos_token_id=[],
    )
    assert out.sequences.tolist() == _greedy(pair.target, ids).tolist()
    assert out.stats.new_tokens == N_NEW and out.stats.target_calls < N_NEW + 1  # it drafted, and some were taken
    greedy = sd.greedy_decode(pair.target, ids, max_new_tokens=N_NEW, eos_token_id=[])
    assert torch.equal(greedy.sequences, out.sequences)


@pytest.mark.parametrize("preset", PRESET_TIERS)
def test_notebook_setup_cell_path(offline_hub, preset, capsys):
    """What the notebooks' set-up and load cells do with ``PRESET``: set up, load, pick prompts, encode."""
    from specdec_helpers.present import notebook_help

    notebook_help.setup()
    pair = sd.load_pair(preset)  # as the load cell calls it: default device and dtype (CPU, fp32 here)
    print(pair)  # the load cell's last line
    assert preset in capsys.readouterr().out
    for prompt in notebook_help.prompts_for(pair):
        ids = pair.encode(prompt)
        assert ids.shape[0] == 1 and ids.shape[1] > 1
        assert pair.decode(ids).strip()[:5] == prompt.strip()[:5]


@pytest.mark.parametrize("preset", ["pythia-1.4b/160m", "opt-350m/125m", "gpt2-large/gpt2", "llama-3.2-3b/1b"])
@pytest.mark.parametrize("solution", [pytest.param("kit stand-ins", marks=pytest.mark.slow), "reference solution"])
def test_speculative_decoder_by_hub_name(offline_hub, preset, solution):
    """PA3's constructor: ``SpeculativeDecoder(target_name, draft_name)`` loads both by hub id, with the kit's
    stand-ins and with the instructor's own graded cells (what the notebooks teach students to write)."""
    from specdec_helpers.assignment.parts.cells import load_functions
    from specdec_helpers.assignment.parts.decoder import build_decoder

    functions = {}
    if solution == "reference solution":
        from specdec_helpers.assignment.grading.submission import reference_sources

        functions = load_functions(reference_sources())
    row = get_preset(preset)
    decoder = build_decoder(**functions)(row.target, row.draft, device="cpu")
    ids = decoder.encode("Once upon a time")
    got = decoder.generate_ids(ids, N_NEW, row.num_speculative_tokens)
    want = decoder.greedy_ids(ids, N_NEW)
    assert got.tolist() == want.tolist()


@pytest.mark.slow
def test_grader_measures_a_hub_preset(offline_hub, monkeypatch):
    """The grader's speed measurement loads its pair by preset in the grader and in each child process
    (which inherit the environment): on the PA3 pair the reference is graded identical to greedy.

    Without the sandbox: this cache lies in pytest's private tmp folder, which the student's user cannot
    read, and bubblewrap does not show the hub cache to student code yet (README: grading hub presets)."""
    monkeypatch.setenv("SPECDEC_SANDBOX", "none")
    from specdec_helpers.assignment.grading.speed import measure
    from specdec_helpers.assignment.grading.submission import reference_sources

    ref = reference_sources()
    perf = {"preset": "pythia-1.4b/160m", "max_new_tokens": 16, "repeats": 2, "warmup": 0, "baseline": "auto"}
    m = measure(ref, ref, perf, seed=0)
    assert m.error == "" and m.identical and m.speculates, m
    assert m.detail["preset"] == "pythia-1.4b/160m" and m.detail["device"] == "cpu"


@pytest.mark.slow
def test_environment_alone_points_at_the_cache(hub_cache_dir):
    """A fresh process with only the environment variables set (as a student's shell would have) loads a preset."""
    home = hub_cache_dir.parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "HF_HUB_CACHE": str(hub_cache_dir)}
    code = (
        "import specdec_helpers as sd; p = sd.load_pair('pythia-1.4b/160m', device='cpu', progress=False); "
        "o = sd.speculative_decode(p.target, p.draft, p.encode('Hello'), max_new_tokens=8); print('ok', o.stats.new_tokens)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok 8" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_selfcheck_at_a_hub_preset(offline_hub, tmp_path):
    """`selfcheck --preset pythia-1.4b/160m` (what an instructor runs on a Colab GPU) on the synthesized cache:
    greedy, tree and ours-vs-HF sections pass, in fp32 and in bf16 (near-ties allowed there)."""
    import json

    from specdec_helpers.cli import main

    for dtype in ("fp32", "bf16"):
        out = tmp_path / f"{dtype}.json"
        code = main(
            [
                "selfcheck",
                "--preset",
                "pythia-1.4b/160m",
                "--device",
                "cpu",
                "--dtype",
                dtype,
                "--no-progress",
                "--skip",
                "sampling,notebooks,grader",
                "--prompts",
                "1",
                "--repeats",
                "1",
                "--json",
                str(out),
            ]
        )
        result = json.loads(out.read_text())
        assert code == 0 and result["passed"], [r for r in result["rows"] if r["status"] == "FAIL"]
        assert {r["section"] for r in result["rows"]} == {"greedy", "tree", "ours vs HF"}


def test_auto_times_the_drafts_of_its_target_and_picks_the_best_bound(offline_hub, monkeypatch):
    """``load_pair("auto")`` where it resolves to a Pythia pair: each preset draft of pythia-1.4b is timed against the
    target on this device, and the draft and k with the highest bound win (here tiny stand-ins on a CPU)."""
    from specdec_helpers.models import choose, pairs

    monkeypatch.setattr(pairs, "auto_choice", lambda: ("pythia-1.4b/160m", "auto: (test) the PA3 target"))
    seen = {}
    real = choose.choose

    def spy(target, drafts, **kwargs):
        seen["choice"] = real(target, drafts, **kwargs)
        return seen["choice"]

    monkeypatch.setattr(pairs, "choose", spy)
    pair = sd.load_pair("auto", device="cpu", progress=False)
    choice = seen["choice"]
    assert set(choice.table) == {"pythia-1.4b/160m", "pythia-1.4b/70m", "pythia-1.4b/410m"}
    best = max(choice.table.values(), key=lambda row: row["bound"])
    assert pair.preset == choice.name and pair.num_speculative_tokens == choice.k == best["k"]
    assert pair.draft.config.name_or_path == get_preset(choice.name).draft
    assert pair.reason.startswith("auto: (test)") and "chose " + choice.name in pair.reason
    assert all(name in pair.reason for name in choice.table)
    ids = pair.encode("The quick brown fox")
    out = sd.speculative_decode(
        pair.target, pair.draft, ids, max_new_tokens=8, num_speculative_tokens=pair.num_speculative_tokens
    )
    assert torch.equal(out.sequences, _greedy(pair.target, ids, 8))
    # By name, PA3's own pairs come as the table says, untimed.
    named = sd.load_pair("pythia-1.4b/70m", device="cpu", progress=False)
    assert named.num_speculative_tokens == 4 and named.draft.config.name_or_path == get_preset("pythia-1.4b/70m").draft


def test_the_bound_prefers_a_cheap_draft_where_steps_are_launch_bound():
    from specdec_helpers.models.choose import bound

    # The H100 (eager): 70m at c = 0.29 against 160m at 0.60, verify ~1.14 steps.
    cheap = max(bound(0.65, k, 0.29, 1.14) for k in range(1, 9))
    accurate = max(bound(0.9, k, 0.60, 1.14) for k in range(1, 9))
    assert cheap > accurate > 1
    assert bound(1.0, 4, 0.0, 1.0) == 5 and abs(bound(0.5, 1, 0.0, 1.0) - 1.5) < 1e-12


def test_auto_on_a_gpu_without_the_hub_finds_the_pa3_pair_in_the_local_cache(offline_hub, monkeypatch):
    """Offline with the Pythia weights cached, ``auto`` on a GPU still picks the PA3 pair; without them it says both
    reasons; on a CPU its reason names the CPU (a GPU student must never read 'on the CPU')."""
    from specdec_helpers.models import pairs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    preset, why = pairs.auto_choice()
    assert preset == "pythia-1.4b/160m" and "local hub cache" in why
    monkeypatch.setattr(pairs, "_in_hub_cache", lambda preset: False)
    monkeypatch.setattr(pairs, "smollm2_available", lambda: True)
    preset, why = pairs.auto_choice()
    assert preset == "smollm2-135m" and "not in its local cache" in why and "on the CUDA GPU" in why
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "on the CPU" in pairs.auto_choice()[1]
