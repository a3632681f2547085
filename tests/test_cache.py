"""Cache folders (converted SmolLM2 weights, trained drafts): whole or rebuilt, shared, built once.

Each test reproduces a failure users hit: a cache unreadable to other users (0700/0600), two first
uses building twice, hidden temp folders left by killed runs, and damaged files loaded silently or
failing with an error that names no file."""

import os
import threading
import time

import pytest
import torch

from specdec_helpers.models import smollm2, store
from test_pairs import WORDS, word_tokenizer
from tiny_models import tiny_model


def _write_private(tmp):
    fd = os.open(tmp / "weights.bin", os.O_WRONLY | os.O_CREAT, 0o600)  # as some writers do
    os.write(fd, b"\0" * 100)
    os.close(fd)


def test_cache_folder_follows_the_umask_not_mkdtemp(tmp_path):
    old = os.umask(0o022)
    try:
        folder = store.cached_folder(tmp_path / "c", _write_private, progress=False)
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o777 == 0o755
    assert (folder / "weights.bin").stat().st_mode & 0o777 == 0o644
    assert (folder / store.MANIFEST).stat().st_mode & 0o777 == 0o644


def test_concurrent_first_uses_build_once(tmp_path):
    calls = []

    def build(tmp):
        calls.append(1)
        time.sleep(0.5)
        (tmp / "a.txt").write_text("built")

    threads = [threading.Thread(target=store.cached_folder, args=(tmp_path / "c", build, False)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert (tmp_path / "c" / "a.txt").read_text() == "built" and store.folder_problem(tmp_path / "c") is None


def test_leftovers_of_killed_runs_are_removed(tmp_path):
    dead = tmp_path / ".c-999999999-abc"  # no such pid
    old = tmp_path / f".c-{os.getpid()}-old"  # alive pid, but far too old
    live = tmp_path / f".c-{os.getpid()}-now"  # a build in progress right now
    for leftover in (dead, old, live):
        leftover.mkdir()
        (leftover / "partial").write_bytes(b"x")
    hours_ago = time.time() - (store.LEFTOVER_HOURS + 1) * 3600
    os.utime(old, (hours_ago, hours_ago))
    store.cached_folder(tmp_path / "c", lambda tmp: (tmp / "a").write_text("a"), progress=False)
    assert not dead.exists() and not old.exists()
    assert live.exists()


# --------------------------------------------------------------------------- damaged SmolLM2 cache


@pytest.fixture
def fake_smollm2(tmp_path, monkeypatch):
    """load_smollm2 with a tiny model standing in for the GGUF conversion; counts conversions."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(smollm2, "smollm2_gguf", lambda: tmp_path / "fake.gguf")
    calls = []

    def convert(folder, progress):
        calls.append(folder)
        tiny_model("llama", vocab=64, eos_token_id=1).save_pretrained(folder)
        word_tokenizer(WORDS).save_pretrained(folder)

    monkeypatch.setattr(smollm2, "_convert_smollm2", convert)
    smollm2.load_smollm2(progress=False)
    assert len(calls) == 1
    return tmp_path / "cache" / smollm2._SMOLLM2_CACHE, calls


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_bit(path):
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # inside the weights, past the header: loads fine, computes something else
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage, name",
    [
        (_truncate, "model.safetensors"),
        (_flip_a_bit, "model.safetensors"),
        (_truncate, "tokenizer.json"),
        (os.remove, "tokenizer.json"),  # once asked for sentencepiece
    ],
)
def test_damaged_smollm2_cache_is_converted_again_naming_the_file(fake_smollm2, damage, name, capsys):
    folder, calls = fake_smollm2
    reference = (folder / "model.safetensors").read_bytes()
    damage(folder / name)
    model, tokenizer = smollm2.load_smollm2(progress=True)
    assert len(calls) == 2
    assert f"{name} is " in capsys.readouterr().err  # "... is damaged" / "... is missing": rebuilding
    assert (folder / "model.safetensors").read_bytes() == reference
    assert store.folder_problem(folder) is None
    assert tokenizer("the cat").input_ids and isinstance(model, torch.nn.Module)


def test_an_intact_smollm2_cache_is_loaded_not_converted(fake_smollm2):
    folder, calls = fake_smollm2
    smollm2.load_smollm2(progress=False)
    assert len(calls) == 1


def test_a_cache_without_manifest_counts_as_unfinished(fake_smollm2):
    folder, calls = fake_smollm2
    (folder / store.MANIFEST).unlink()  # e.g. written by an older version, or killed mid-way
    assert "manifest.json is missing" in store.folder_problem(folder)
    smollm2.load_smollm2(progress=False)
    assert len(calls) == 2
