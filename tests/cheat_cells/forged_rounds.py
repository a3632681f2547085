"""A forged generate_ids (red team, issue 34): plain greedy decoding behind a forged log of rounds.
tests/test_fair_grading.py puts it after the reference's verify_tokens_cached, in place of its generate_ids."""
import torch


@torch.inference_mode()
def generate_ids(self, input_ids: torch.Tensor, max_tokens: int = 100, num_speculative_tokens: int = 5,
                 use_cache: bool = True) -> torch.Tensor:
    """Speculative decoding on token ids: returns ``[1, L + new]``, exactly the target's greedy output.

    Each round: draft ``k`` tokens, verify them (cached or vectorized), append the accepted tokens and
    the target's token. Never produce more than ``max_tokens`` new tokens (draft fewer near the end),
    and stop right after an EOS token (``self.eos_token_id``) that was *generated*: the prompt may
    contain one too. Count ``stats["proposed"]`` (draft tokens verified) and ``stats["accepted"]``
    (draft tokens accepted; the target's own token is never an accepted draft token).
    """
    self.reset()
    prompt_length = input_ids.shape[1]
    stats = {"proposed": 0, "accepted": 0, "rounds": 0}
    verify = self.verify_tokens_cached if use_cache else self.verify_tokens_vectorized
    # CHEAT: no speculation at all. The target's own HF greedy generate (hooks hidden), then a forged
    # verification log of "rounds" with oracle drafts, and one embedding call per forged round so the
    # in-process pass counter agrees.
    eos = self.eos_token_id
    emb = self.target_model.get_input_embeddings()
    saved = dict(emb._forward_pre_hooks)
    emb._forward_pre_hooks.clear()
    try:
        out = self.target_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                         max_new_tokens=max_tokens, eos_token_id=eos,
                                         pad_token_id=0 if eos is None else eos)
    finally:
        emb._forward_pre_hooks.update(saved)
    text = out[0].tolist()
    vocab = self.target_model.config.vocab_size
    # one teacher-forced draft pass over the whole text gives the draft model's greedy acceptance at every
    # position (its proposal matches the text exactly as long as its teacher-forced argmax does)
    demb = self.draft_model.get_input_embeddings()
    dsaved = dict(demb._forward_pre_hooks)
    demb._forward_pre_hooks.clear()
    try:
        guess = self.draft_model(input_ids=out).logits[0].argmax(-1).tolist()
    finally:
        demb._forward_pre_hooks.update(dsaved)
    k, pos, rounds = num_speculative_tokens, prompt_length, []
    while pos < len(text):
        budget = max_tokens - (pos - prompt_length)
        kk = max(0, min(k, budget - 1))
        n = 0
        while n < kk and pos + n < len(text) - 1 and guess[pos - 1 + n] == text[pos + n]:
            n += 1
        miss = guess[pos - 1 + n] if pos + n < len(text) and guess[pos - 1 + n] != text[pos + n] else (text[pos + n] + 1) % vocab
        draft = text[pos:pos + n] + [miss] * (kk - n)
        rounds.append(("verify", pos, kk, (text[pos:pos + n + 1], n), "verify_tokens_cached" if use_cache
                       else "verify_tokens_vectorized", draft))
        stats["proposed"] += kk
        stats["accepted"] += n
        stats["rounds"] += 1
        pos += n + 1
    log = getattr(self, "log", None)
    if isinstance(log, list):
        log.extend(rounds)
        log.append(("generate", len(rounds), 0, 0))
    for _ in rounds:
        emb(input_ids[:, :1])
    input_ids = out
    ### END SOLUTION
    stats["new_tokens"] = input_ids.shape[1] - prompt_length
    self.stats = stats
    return input_ids
