"""One drafter, two threads: a drafter keeps a KV cache, so a second decode using it at the same time
gets a clear error instead of corrupting the first (it once failed with a size mismatch)."""

import threading

import pytest
import torch
from tiny_models import hf_greedy, perturbed_copy, tiny_model

from specdec_helpers.core.decode import speculative_decode
from specdec_helpers.core.drafters import HybridDrafter, exclusive


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama")
    return target, perturbed_copy(target, scale=0.1)


def test_a_drafter_in_use_is_refused_clearly(pair):
    target, draft = pair
    hybrid = HybridDrafter(draft)
    ids = torch.tensor([[3, 4, 5, 3, 4]])
    with exclusive(hybrid), pytest.raises(RuntimeError, match="already decoding.*its own"):
        speculative_decode(target, hybrid, ids, max_new_tokens=8, num_speculative_tokens=3)
    out = speculative_decode(target, hybrid, ids, max_new_tokens=8, num_speculative_tokens=3)  # released again
    assert torch.equal(out.sequences, hf_greedy(target, ids, 8))


def test_two_threads_sharing_one_drafter_get_right_text_or_the_clear_error(pair):
    target, draft = pair
    hybrid = HybridDrafter(draft)
    ids = torch.tensor([[3, 4, 5, 3, 4]])
    expected = hf_greedy(target, ids, 24)
    outcomes = []

    def work():
        for _ in range(5):
            try:
                out = speculative_decode(target, hybrid, ids, max_new_tokens=24, num_speculative_tokens=3)
                outcomes.append(torch.equal(out.sequences, expected))
            except RuntimeError as error:
                outcomes.append("already decoding" in str(error))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == 10 and all(outcomes)


def test_a_pad_token_inside_the_prompt_is_refused():
    """generate(ids) masks pad tokens when no attention mask is given; speculative decoding reads them,
    and so wrote other text than generate(ids). Encoding such a prompt now says so."""
    from specdec_helpers.models.pairs import load_pair

    pair = load_pair("toy", progress=False)
    pad = pair.tokenizer.pad_token_id
    assert pad != pair.tokenizer.eos_token_id
    with pytest.raises(ValueError, match=rf"pad token '<\|pad\|>' \(id {pad}\).*remove it"):
        pair.encode("The <|pad|>for statement")
    ids = pair.encode("The for statement")
    out = speculative_decode(pair.target, pair.draft, ids, max_new_tokens=8)
    with torch.no_grad():
        assert torch.equal(out.sequences, pair.target.generate(ids, do_sample=False, max_new_tokens=8))
