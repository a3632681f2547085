"""Generate the course notebooks 01-07 (and optionally execute them).

    python notebooks/_build.py                 # write notebooks/0*.ipynb (sources only)
    python notebooks/_build.py --execute       # ... and run them (SPECDEC_PRESET=toy) to save outputs
    python notebooks/_build.py --student DIR   # student copies: solutions replaced by NotImplementedError

The notebooks are generated so that the repository URL (``specdec_helpers.present.notebook.REPO_URL``), the
set-up cell and the conventions live in one place. Edit the cells here, not in the .ipynb files.
Solutions sit between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader's markers).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from specdec_helpers import notebook as nbh  # noqa: E402

IGNORE = "# NBVAL_IGNORE_OUTPUT\n"
CHECK = "# NBVAL_CHECK_OUTPUT\n"


def md(text: str):
    return new_markdown_cell(text.strip("\n"))


def code(text: str, *, tags=(), ignore=False, check=False):
    source = text.strip("\n")
    if ignore:
        source = IGNORE + source
    if check:
        source = CHECK + source
    cell = new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def header(filename: str, title: str, goals: list[str], intro: str = ""):
    goal_lines = "\n".join(f"- {g}" for g in goals)
    return md(f"""
# {title}

{nbh.colab_badge(filename)}

{intro.strip()}

**What you will learn**

{goal_lines}

Run the cells from top to bottom. Cells marked **Exercise** leave a piece for you to write; the
**Check** cell right after each one tells you whether it works (and what to fix if it does not).
""")


def setup_cells(extra_imports: str = "", params: str = ""):
    setup = f"""
# Set-up: works on Colab and locally. On Colab this installs the course kit from its repository
# (about a minute); in a local checkout it uses the package next to this folder.
import os, subprocess, sys

try:
    import specdec_helpers
except ImportError:
    if "google.colab" in sys.modules:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "{nbh.pip_install_spec()}"], check=True)
    else:
        sys.path.insert(0, os.path.abspath(".."))  # notebooks/ -> the repository root

import specdec_helpers as sd
from specdec_helpers.present import notebook as nb

info = nb.setup()  # quiets library warnings, reports versions and whether there is a GPU
import torch
{extra_imports.strip()}
"""
    parameters = f"""
# Parameters (papermill/nbval can override this cell). "auto": a Pythia pair on a GPU with internet,
# else the offline "toy" pair. Other choices: the preset table in notebook 01.
PRESET = os.environ.get("SPECDEC_PRESET", "auto")
{params.strip()}
"""
    return [code(setup, ignore=True), code(parameters, tags=["parameters"])]


LOAD_PAIR = """
pair = load_pair(PRESET)       # the first use of "toy" trains it (a minute or two), later ones load it
tok = pair.tokenizer
torch.set_grad_enabled(False)  # from here on inference only: no autograd bookkeeping
print(pair)
"""


# --------------------------------------------------------------------------- 01


def nb01():
    f = "01_model_init.ipynb"
    return [
        header(f, "01 · A target, a draft, and the cost of one forward pass", [
            "what a *model pair* is, and why the draft must share the target's tokenizer",
            "how to pick the device and the dtype (fp16 on a GPU, fp32 on a CPU)",
            "how big the two models are (parameters, memory)",
            "the fact speculative decoding is built on: one forward pass over k + 1 tokens costs about as "
            "much as a pass over one token, so *verifying* k draft tokens costs about one decoding step",
        ], intro="""
Speculative decoding runs two language models: a large **target** whose output we want, and a small,
fast **draft** that guesses the next few tokens. The target then checks all the guesses in a single
forward pass. This notebook loads such a pair and measures why that check is cheap.
"""),
        *setup_cells("""
from IPython.display import Markdown, display
from specdec_helpers.models import pairs as sd_pairs
from specdec_helpers.models.pairs import check_compatible, load_pair
from specdec_helpers.measure.bench import measure_forward_cost
from specdec_helpers.present.plots import plot_forward_cost
""", params="COST_SIZES = [*range(1, 10), 12, 16, 24, 32]  # tokens per forward pass for the cost curve\nCOST_REPEATS = 3"),
        md("""
## 1. The presets

A *preset* names a target, a draft and a good number of draft tokens per round (k). The hub presets
reproduce the pairs of the PA3 assignment on a Colab GPU; the offline ones need no network at all:
`toy` is a tiny GPT-NeoX pair trained on your machine (once, then cached), `smollm2-135m` uses real
weights on a CPU.
"""),
        code("""
rows = sd_pairs.list_presets()
table = "| preset | offline | target | draft | k | note |\\n|---|---|---|---|---|---|\\n"
table += "\\n".join(f"| {r['name']} | {'yes' if r['offline'] else ''} | {r['target']} | {r['draft']} | {r['k']} | {r['note']} |"
                   for r in rows)
display(Markdown(table))
"""),
        md("""
## 2. Loading the pair

`load_pair` loads the target, the draft and the shared tokenizer, puts them on the device and checks
that they are compatible. With `PRESET = "auto"` it takes a Pythia pair when there is a GPU and the
Hugging Face hub is reachable, and the offline `toy` pair otherwise (trained once on your machine,
then loaded from a cache).
"""),
        code(LOAD_PAIR, ignore=True),
        md("""
### Same tokenizer, or nothing works

The target judges the draft by comparing **token ids**: "is the draft's token 4711 the token the
target would have picked?" That only means something if id 4711 is the same piece of text for both
models. PA3's starter code asserted `target_tokenizer.vocab == draft_tokenizer.vocab`;
`check_compatible` does the same and also checks that both models have an embedding row for every
id the tokenizer can produce. (Embedding tables are often *padded*: Pythia's config says 50304 rows
for a 50277-token tokenizer. Padding is fine; fewer rows is not.)
"""),
        code("""
models = [m for m in (pair.target, pair.draft) if isinstance(m, torch.nn.Module)]
check_compatible(pair.tokenizer, *models)
print("compatible: one vocabulary of", len(pair.tokenizer), "tokens;",
      "embedding rows:", [m.get_input_embeddings().num_embeddings for m in models])
"""),
        md("""
What an incompatible pair looks like: the same tokenizer with one extra token, which shifts nothing
for existing tokens but is already a different vocabulary. The check refuses, and says what to do.
"""),
        code("""
import copy

other = copy.deepcopy(pair.tokenizer)
other.add_tokens(["<a-token-the-target-never-saw>"])
try:
    check_compatible(pair.tokenizer, other)
except ValueError as error:
    print("ValueError:", str(error)[:400])
"""),
        md("""
**Exercise 1.** Write `same_vocabulary(tok_a, tok_b)`: `True` when both tokenizers map exactly the
same token strings to the same ids. (`tokenizer.get_vocab()` returns that mapping as a dict.)
"""),
        code("""
def same_vocabulary(tok_a, tok_b) -> bool:
    ### BEGIN SOLUTION
    return tok_a.get_vocab() == tok_b.get_vocab()
    ### END SOLUTION
"""),
        code("""
nb.check(lambda: same_vocabulary(pair.tokenizer, pair.tokenizer) and not same_vocabulary(pair.tokenizer, other),
         "identical vocabularies pass and a vocabulary with one extra token is caught.",
         "compare the two token -> id dicts from get_vocab(); one extra token must make them differ.")
""", check=True),
        md("""
## 3. Device and dtype

On a GPU the pair is loaded in **fp16**: half the memory of fp32 and the fast tensor-core matmuls.
On a CPU, fp16 matrix multiplication is slow (few CPUs have fast fp16 units), so fp32 is the
default there. Both models must sit on the same device: the draft's tokens go straight into the
target's input.
"""),
        code("""
for name, model in [("target", pair.target), ("draft", pair.draft)]:
    if isinstance(model, torch.nn.Module):
        p = next(model.parameters())
        print(f"{name:6s}: {type(model).__name__:24s} device={p.device}  dtype={p.dtype}")
    else:
        print(f"{name:6s}: {type(model).__name__} (no model: drafts without a forward pass)")
print("pair:", pair.device, pair.dtype)
"""),
        md("""
## 4. How big are they?

**Exercise 2.** Write `count_parameters(model)` (all parameters, as an int) and
`model_megabytes(model)` (parameter memory in MB = bytes / 1e6; each tensor knows its
`element_size()` in bytes).
"""),
        code("""
def count_parameters(model) -> int:
    ### BEGIN SOLUTION
    return sum(p.numel() for p in model.parameters())
    ### END SOLUTION


def model_megabytes(model) -> float:
    ### BEGIN SOLUTION
    return sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
    ### END SOLUTION
"""),
        code("""
target_params = count_parameters(pair.target)
nb.check(lambda: target_params == pair.target.num_parameters()
         and abs(model_megabytes(pair.target) - pair.target.get_memory_footprint(return_buffers=False) / 1e6) < 1e-6,
         "parameter count and memory match transformers' own num_parameters() and get_memory_footprint().",
         "sum p.numel() over model.parameters(); for memory multiply by p.element_size() and divide by 1e6.")
""", check=True),
        code("""
for name, model in [("target", pair.target), ("draft", pair.draft)]:
    if isinstance(model, torch.nn.Module):
        print(f"{name:6s}: {count_parameters(model) / 1e6:8.2f} M parameters, {model_megabytes(model):8.1f} MB")
if isinstance(pair.draft, torch.nn.Module):
    print(f"the draft has {count_parameters(pair.draft) / count_parameters(pair.target):.1%} of the target's parameters")
""", ignore=True),
        md("""
## 5. The cost of one forward pass vs the number of tokens in it

Decoding one token = one forward pass over **one** new position (the earlier ones sit in the KV
cache). Verifying k draft tokens = one forward pass over **k + 1** new positions. If a pass over
k + 1 positions cost k + 1 times as much, speculative decoding could never win. It does not: for
a small batch the pass is dominated by *reading the weights* from memory (and, on a CPU with a tiny
model, by Python and framework overhead), which is the same whether 1 or 16 positions go through.

`measure_forward_cost` times one pass over `n` new tokens on top of a cached prompt, for each `n`,
with the sizes interleaved and the median of several runs.
"""),
        code("""
prompt_ids = pair.encode(nb.prompts_for(pair)[0])
curve = measure_forward_cost(pair.target, prompt_ids, sizes=COST_SIZES, repeats=COST_REPEATS)
display(plot_forward_cost(curve))
one = curve["median_s"][0]
for n in (1, 2, 5, 9, 17, 32):
    if n in curve["sizes"]:
        t = curve["median_s"][curve["sizes"].index(n)]
        print(f"{n:2d} tokens in one pass: {t * 1e3:6.2f} ms = {t / one:4.2f} x one token  (vs {n} x if one by one)")
""", ignore=True),
        md("""
**Exercise 3.** From `curve`, compute `verify_cost(curve, k)`: the time of one pass over `k + 1`
tokens divided by the time of a pass over 1 token. It is the price of verifying k draft tokens,
measured in decoding steps. (`curve["sizes"]` and `curve["median_s"]` are parallel lists.)
"""),
        code("""
def verify_cost(curve, k: int) -> float:
    ### BEGIN SOLUTION
    times = dict(zip(curve["sizes"], curve["median_s"]))
    return times[k + 1] / times[1]
    ### END SOLUTION
"""),
        code("""
k = pair.num_speculative_tokens
nb.check(lambda: abs(verify_cost(curve, k) - curve["median_s"][k] / curve["median_s"][0]) < 1e-12,
         f"verify_cost(curve, k) is the (k+1)-token pass over the 1-token pass.",
         "look up the median time at size k + 1 and divide by the one at size 1.")
""", check=True),
        code("""
print(f"verifying k = {k} draft tokens costs {verify_cost(curve, k):.2f} decoding steps of the target "
      f"(decoding them one by one would cost {k + 1})")
""", ignore=True),
        md("""
**What to take away.** On a GPU the curve is nearly flat up to dozens of tokens: verification is
almost free, and the speed-up is set by how many draft tokens get accepted and how cheap the draft
is. On a CPU it rises sooner, because the arithmetic itself starts to count; with the tiny `toy`
model the fixed per-call overhead of PyTorch and transformers is a large part of each step. Keep
the number you just printed in mind: notebook 05 puts it into the speed-up formula.

Next: **02 · Drafting**, where the draft proposes its k tokens.
"""),
    ]


# --------------------------------------------------------------------------- 02


def nb02():
    f = "02_draft_generation.ipynb"
    return [
        header(f, "02 · Drafting k tokens", [
            "how to draft k tokens with `generate()` (the PA3 way) and with a KV-cached loop, and why the loop is faster",
            "what the draft proposes next to what the target would pick",
            "prompt lookup: drafting with no model at all, by copying from the text so far",
        ], intro="""
Each round of speculative decoding starts with the draft proposing k tokens. The draft runs k
times per round, so every millisecond it costs is paid k times: how we run it matters as much as
how good it is.
"""),
        *setup_cells("""
from IPython.display import HTML, display
from specdec_helpers.core.timing import timed
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.core.drafters import ModelDrafter, PromptLookupDrafter
from specdec_helpers.present.widgets import render_html
""", params="K = 5\nROUNDS = 12  # drafting rounds in the timing comparison"),
        code(LOAD_PAIR + """
draft_model = pair.draft if isinstance(pair.draft, torch.nn.Module) else None
prompts = nb.prompts_for(pair)
prompt_ids = pair.encode(prompts[0])
print("prompt:", repr(prompts[0]), "->", prompt_ids.shape[1], "tokens")
""", ignore=True),
        md("""
## 1. Drafting with `generate()`

The PA3 starter code drafted with Hugging Face's `generate`: greedy, `max_new_tokens=k`, then keep
the new tokens only. It is short and correct.

**Exercise 1.** Write `draft_with_generate(model, input_ids, k)` returning the k new token ids as a
1-D tensor. Pass `do_sample=False`, `max_new_tokens=k` and an all-ones `attention_mask`.
"""),
        code("""
@torch.inference_mode()
def draft_with_generate(model, input_ids, k):
    ### BEGIN SOLUTION
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False, max_new_tokens=k)
    return out[0, input_ids.shape[1]:]
    ### END SOLUTION
"""),
        code("""
def _same_as_cached_loop():
    if draft_model is None:
        return True  # this preset drafts without a model
    mine = draft_with_generate(draft_model, prompt_ids, K)
    reference = ModelDrafter(draft_model).propose(prompt_ids, K).tokens
    return mine.shape == (K,) and torch.equal(mine, reference)

nb.check(_same_as_cached_loop, "your k draft tokens are exactly the draft's greedy continuation.",
         "generate() returns prompt + new tokens: keep only the part after input_ids.shape[1], as a 1-D tensor.")
""", check=True),
        md("""
## 2. A KV-cached drafting loop

`ModelDrafter` drafts token by token with its own KV cache, kept **across rounds**. Read `propose`:
each round it rolls its cache back to the text both models agree on, feeds only the tokens it has
not seen yet, and then one token per step.
"""),
        code("""
import inspect
print(inspect.getsource(ModelDrafter.propose))
"""),
        md("""
Why is that faster than `generate()`?

1. `generate()` starts from nothing on every call: it re-reads the **whole text** (a prefill over
   all L tokens) before producing the first draft token. The loop's cache already holds the text,
   so it feeds only the one or few tokens that were added since the last round.
2. `generate()` sets up logits processors, stopping criteria, a new cache and input checks on every
   call. With a small draft that fixed cost is comparable to the model itself.

Let us time both over `ROUNDS` rounds in which the text grows by k tokens each time (as if the
target had accepted every draft token).
"""),
        code("""
def time_drafting(propose, rounds=ROUNDS, k=K):
    ids, seconds = prompt_ids, 0.0
    for _ in range(rounds):
        tokens, t = timed(lambda: propose(ids, k), pair.device)   # device-synced wall time
        seconds += t
        ids = torch.cat([ids, tokens.view(1, -1)], dim=1)
    return seconds / rounds, ids

if draft_model is not None:
    drafter = ModelDrafter(draft_model)
    for _ in range(2):  # warm-up: first calls pay one-off costs
        time_drafting(lambda ids, k: draft_with_generate(draft_model, ids, k), rounds=2)
        drafter.reset(); time_drafting(lambda ids, k: drafter.propose(ids, k).tokens, rounds=2)
    t_generate, text_generate = time_drafting(lambda ids, k: draft_with_generate(draft_model, ids, k))
    drafter.reset()
    t_loop, text_loop = time_drafting(lambda ids, k: drafter.propose(ids, k).tokens)
    assert torch.equal(text_generate, text_loop), "both ways must draft the same tokens"
    print(f"generate():      {t_generate * 1e3:7.2f} ms per round of {K} draft tokens")
    print(f"KV-cached loop:  {t_loop * 1e3:7.2f} ms per round  ->  {t_generate / t_loop:.1f}x faster, same tokens")
else:
    print("this preset's draft is not a model; skip to prompt lookup below")
""", ignore=True),
        md("""
## 3. What the draft proposes vs what the target would pick

The draft is useful exactly as far as its guesses match the target's. Below, the draft proposes k
tokens for each prompt, and next to them are the k tokens the target itself produces greedily. The
target will accept the draft tokens up to the first ✗.
"""),
        code("""
drafter = ModelDrafter(draft_model) if draft_model is not None else pair.draft
for text in prompts[:3]:
    ids = pair.encode(text)
    drafter.reset()
    proposal = drafter.propose(ids, K).tokens.tolist()
    wanted = sd.greedy_decode(pair.target, ids, max_new_tokens=K).new_tokens.tolist()
    print(f"prompt: {text!r}")
    first_miss = next((j for j, (a, b) in enumerate(zip(proposal, wanted)) if a != b), len(proposal))
    for j, (d, t) in enumerate(zip(proposal, wanted)):
        mark = "✓" if j < first_miss else ("✗ first mismatch" if j == first_miss else "  (never checked: after a mismatch)")
        print(f"   {j}: draft {tok.decode([d])!r:>14}  target {tok.decode([t])!r:>14}  {mark}")
    print()
""", ignore=True),
        md("""
A fairer measure of how well the draft imitates the target: **teacher-forced agreement**. Take the
target's own greedy text and, at every position, ask "would the draft have picked the same next
token?" One forward pass of each model over the whole text answers it for every position at once.

**Exercise 2.** Write `agreement(target, draft, ids, start)`: the fraction of positions
`start .. L-1` of `ids` (shape `[1, L]`) where the draft's argmax prediction equals the target's.
Remember the off-by-one: the logits at position `i` predict the token at `i + 1`, so the prediction
*for* position `p` sits in row `p - 1`.
"""),
        code("""
@torch.inference_mode()
def agreement(target, draft, ids, start):
    ### BEGIN SOLUTION
    t = target(ids).logits[0, start - 1 : -1]
    d = draft(ids).logits[0, start - 1 : -1, : t.shape[-1]]  # cut padded vocabulary rows, if any
    return (t.argmax(-1) == d.argmax(-1)).float().mean().item()
    ### END SOLUTION
"""),
        code("""
if draft_model is not None:
    text_ids = sd.greedy_decode(pair.target, prompt_ids, max_new_tokens=24).sequences
    start = prompt_ids.shape[1]
    # An independent reference: ask each model for one greedy token at every prefix (slow but plain).
    ref = []
    for p in range(start, text_ids.shape[1]):
        prefix = text_ids[:, :p]
        ref.append(int(draft_model(prefix).logits[0, -1].argmax()) == int(pair.target(prefix).logits[0, -1].argmax()))
    reference = sum(ref) / len(ref)
    nb.check(lambda: abs(agreement(pair.target, draft_model, text_ids, start) - reference) < 1e-6,
             "your one-pass agreement equals the token-by-token reference.",
             "use rows start-1 .. L-2 of each model's logits (row i predicts token i+1) and compare the argmaxes.")
else:
    nb.check(True, "nothing to compare for a model-free draft.", "")
""", check=True),
        code("""
if draft_model is not None:
    for text in prompts[:3]:
        ids = pair.encode(text)
        full = sd.greedy_decode(pair.target, ids, max_new_tokens=40).sequences
        print(f"{agreement(pair.target, draft_model, full, ids.shape[1]):6.1%}  {text!r}")
""", ignore=True),
        md("""
## 4. Prompt lookup: a draft with no model

When the output repeats the input (summaries quoting the source, code edits, song lyrics), the best
guess for the next tokens is often "what followed the same words last time". `PromptLookupDrafter`
finds the latest earlier occurrence of the text's last n-gram and proposes what came after it. It
costs no forward pass at all, so even a low acceptance rate is free. (Its `grow_with_match` option,
off by default, proposes at most twice as many tokens as the text matched: a long match means a
whole passage repeats. The `"prompt-lookup:2"` draft uses it.)
"""),
        code("""
print(inspect.getsource(PromptLookupDrafter.propose))
"""),
        md("""
**Exercise 3.** Write `lookup(ids, k, n)` on a plain list of ints: find the **latest** earlier
position where the last `n` tokens of `ids` occurred before (not counting the occurrence at the
very end) and return the up-to-`k` tokens that followed it; `[]` if there is none.
"""),
        code("""
def lookup(ids: list[int], k: int, n: int) -> list[int]:
    ### BEGIN SOLUTION
    tail = ids[-n:]
    for start in range(len(ids) - n - 1, -1, -1):
        if ids[start : start + n] == tail:
            return ids[start + n : start + n + k]
    return []
    ### END SOLUTION
"""),
        code("""
cases = [([1, 2, 3, 9, 1, 2], 3, 2), ([5, 6, 7, 5, 6, 8, 5, 6], 2, 2), ([1, 2, 3], 2, 1), ([4, 4, 4, 4], 5, 2),
         ([7, 1, 2, 7, 3, 4, 7], 4, 1)]

def _matches():
    for ids, k, n in cases:
        expected = PromptLookupDrafter(max_ngram=n, min_ngram=n).propose(torch.tensor([ids]), k).tokens.tolist()
        if lookup(ids, k, n) != expected:
            print("differs on", (ids, k, n), "expected", expected, "got", lookup(ids, k, n))
            return False
    return True

nb.check(_matches, "your lookup proposes what PromptLookupDrafter proposes on every case.",
         "scan from the right for the latest earlier match of the last n tokens; return what followed it.")
""", check=True),
        md("""
Prompt lookup shines when the text repeats. Compare it with the draft model on a prompt that asks
for repetition (the colours are explained in notebook 03: green = accepted draft token, red =
rejected, orange = the target's correction, blue = the target's bonus token).
"""),
        code("""
repetitive = prompts[-1]  # the song / repetitive prompt of this preset
ids = pair.encode(repetitive)
for name, draft in [("draft model", draft_model), ("prompt lookup", PromptLookupDrafter())]:
    if draft is None:
        continue
    out = sd.speculative_decode(pair.target, draft, ids, max_new_tokens=40, num_speculative_tokens=K)
    s = out.stats
    print(f"{name:13s}: acceptance {s.acceptance_rate:6.1%}, {s.mean_accepted_length:.2f} tokens per target pass")
    display(HTML(render_html(out, tok, ids.shape[1], legend=name == "draft model")))
""", ignore=True),
        md("""
**Summary.** A draft is worth what it agrees with the target *per unit of cost*. Running it in a
KV-cached loop removes the prefill and the `generate()` set-up from every round; prompt lookup
costs nothing and pays off on repetitive text. Next: **03 · Vectorized verification**, where the
target checks all k tokens in one pass, and where the classic off-by-one bug lives.
"""),
    ]


# --------------------------------------------------------------------------- 03


def nb03():
    f = "03_vectorized_verification.ipynb"
    return [
        header(f, "03 · Verifying k draft tokens in one pass", [
            "which logits row judges which draft token (the off-by-one), with a position table",
            "what goes wrong with the shifted comparison: acceptance collapses, and the output still looks right",
            "the target's extra token: a *correction* at the first mismatch, a *bonus* when all k pass",
            "the whole speculative loop without a cache, and proof that it equals greedy decoding",
        ], intro="""
The target sees the text and the k draft tokens in **one** forward pass and returns logits for
every position. Reading the right rows of those logits is the whole trick, and the place where
most first implementations go wrong.
"""),
        *setup_cells("""
from IPython.display import HTML, Markdown, display
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.core.drafters import ModelDrafter
from specdec_helpers.core.verify import accept_greedy, score_draft
from specdec_helpers.present.widgets import render_html, token_explorer
""", params="K = 4\nMAX_NEW_TOKENS = 40"),
        code(LOAD_PAIR + """
prompts = nb.prompts_for(pair)
prompt_ids = pair.encode(prompts[0])
drafter = ModelDrafter(pair.draft) if isinstance(pair.draft, torch.nn.Module) else pair.draft
""", ignore=True),
        md("""
## 1. Which row judges which token?

A causal language model's output at position `i` is its prediction for the token at position
`i + 1`. Put the verified text (length `start`) and the k draft tokens into one pass:

- draft token `j` sits at position `start + j`;
- the target's opinion about it is the prediction made *one position earlier*: row `start - 1 + j`;
- the last row, `start + k - 1`, predicts the token *after* the whole draft: the bonus.

The table shows one real pass. Read across a row: the token at that position, and what the target
predicts for the **next** position.
"""),
        code("""
start = prompt_ids.shape[1]
drafter.reset()
draft_tokens = drafter.propose(prompt_ids, K).tokens
full = torch.cat([prompt_ids, draft_tokens.view(1, -1)], dim=1)
with torch.inference_mode():
    logits = pair.target(full).logits[0]          # [start + K, vocab]
choices = logits.argmax(-1)

rows = ["| position | token at position | target predicts for position+1 | role |", "|---|---|---|---|"]
for i in range(max(0, start - 3), start + K):
    token = tok.decode([int(full[0, i])])
    if i < start - 1:
        role = "prompt"
    elif i == start - 1:
        role = f"last prompt token: its row judges draft token 0"
    elif i < start + K - 1:
        role = f"draft token {i - start}: its row judges draft token {i - start + 1}"
    else:
        role = f"draft token {K - 1}: its row gives the bonus token"
    rows.append(f"| {i} | `{token!r}` | `{tok.decode([int(choices[i])])!r}` | {role} |")
display(Markdown("\\n".join(rows)))
print("draft tokens:", [tok.decode([t]) for t in draft_tokens.tolist()])
""", ignore=True),
        md("""
**Exercise 1.** Write `judge_rows(logits, start, k)`: the `k + 1` rows of `logits` (shape
`[start + k, vocab]`) that judge draft tokens `0 .. k-1`, followed by the row for the bonus token.
"""),
        code("""
def judge_rows(logits, start, k):
    ### BEGIN SOLUTION
    return logits[start - 1 : start + k]
    ### END SOLUTION
"""),
        code("""
def _rows_match():
    expected = score_draft(pair.target, prompt_ids, draft_tokens)  # the kit's one place for this indexing
    mine = judge_rows(logits, start, K)
    return mine.shape == expected.shape and torch.allclose(mine, expected, atol=1e-4)

nb.check(_rows_match, "rows start-1 .. start+k-1: each draft token is judged by the position before it.",
         "the row that judges draft token j is start - 1 + j; take k + 1 rows starting at start - 1.")
""", check=True),
        md("""
## 2. The shifted comparison: a counterexample

> ⚠️ **Counterexample. Do not copy this code.** It reproduces a mistake PA3 students made.

A natural first attempt takes the rows *starting at* `start` ("the draft starts at `start`, so its
logits start there too"). Every draft token is then compared with the target's guess for the token
*after* it.
"""),
        code("""
# ⚠️ COUNTEREXAMPLE (buggy on purpose): rows start .. start+k-1 instead of start-1 .. start+k-2.
@torch.inference_mode()
def buggy_verify(target, input_ids, draft_tokens):
    start, k = input_ids.shape[1], draft_tokens.numel()
    logits = target(torch.cat([input_ids, draft_tokens.view(1, -1)], dim=1)).logits[0]
    predictions = logits[start : start + k].argmax(-1)       # BUG: one row too late
    matches = (predictions == draft_tokens).int()
    return int(matches.cumprod(0).sum())                      # accepted draft tokens


@torch.inference_mode()
def correct_verify(target, input_ids, draft_tokens):
    start, k = input_ids.shape[1], draft_tokens.numel()
    logits = target(torch.cat([input_ids, draft_tokens.view(1, -1)], dim=1)).logits[0]
    predictions = logits[start - 1 : start - 1 + k].argmax(-1)
    return int((predictions == draft_tokens).int().cumprod(0).sum())
"""),
        md("""
Both go into the same PA3-style loop: accept what verification accepted, then take **one token
from the target** (computed correctly, with its own pass over the kept text), repeat.
"""),
        code("""
@torch.inference_mode()
def pa3_style_decode(verify_fn, input_ids, k, max_new_tokens):
    ids, proposed, accepted, rounds = input_ids, 0, 0, 0
    end = input_ids.shape[1] + max_new_tokens
    while ids.shape[1] < end:
        drafter.reset()
        draft = drafter.propose(ids, min(k, end - ids.shape[1] - 1)).tokens
        n = verify_fn(pair.target, ids, draft) if draft.numel() else 0
        ids = torch.cat([ids, draft[:n].view(1, -1)], dim=1)
        next_token = pair.target(ids).logits[0, -1].argmax().view(1, 1)   # the target's own next token
        ids = torch.cat([ids, next_token], dim=1)
        proposed, accepted, rounds = proposed + draft.numel(), accepted + n, rounds + 1
    new = ids.shape[1] - input_ids.shape[1]
    return ids, dict(acceptance=accepted / proposed, new_per_drafted=new / proposed, tokens_per_round=new / rounds)

reference = sd.greedy_decode(pair.target, prompt_ids, max_new_tokens=24).sequences
print(f"{'verify':8s} {'k':>3s} {'acceptance':>11s} {'new tokens / drafted':>21s} {'1/k':>6s} {'same text as greedy':>20s}")
results = {}
for name, fn in [("correct", correct_verify), ("buggy", buggy_verify)]:
    for k in (4, 8):
        ids, r = pa3_style_decode(fn, prompt_ids, k, 24)
        results[name, k] = r
        print(f"{name:8s} {k:3d} {r['acceptance']:11.1%} {r['new_per_drafted']:21.1%} {1 / k:6.1%} "
              f"{str(torch.equal(ids[:, :reference.shape[1]], reference)):>20s}")
""", ignore=True),
        md("""
What the table shows:

- With the shifted rows almost no draft token is ever accepted: each one is compared with the
  target's guess for the *next* position, which matches only by coincidence.
- Every round still gains exactly one token (the target's own), so the loop makes **1 new token per
  k drafted**: 1/k. That is the "acceptance of 1/15 = 6.7% no matter what I tried" that a PA3
  student reported at k = 15, before finding that the start index had to be `input_ids.shape[1] - 1`.
- The text is still **identical to greedy decoding**. The bug costs only speed, so a test that checks
  the output alone cannot find it. Check the acceptance rate too; a draft that is any good should not
  sit at ~1/k.
"""),
        code("""
nb.check(results["buggy", 8]["acceptance"] < results["correct", 8]["acceptance"]
         and abs(results["buggy", 8]["tokens_per_round"] - 1) < 0.5,
         "the shifted comparison accepts (almost) nothing: about one token per round, 1/k per drafted token.",
         "the counterexample should accept far less than the correct version; rerun the cells above in order.")
""", check=True),
        md("""
## 3. Correction and bonus tokens

The verification pass gives more than a yes/no per draft token. If draft token `j` is the first
mismatch, row `start - 1 + j` already holds the target's own choice for that position: the
**correction**, free of charge. If all k draft tokens pass, the last row predicts the token after
them: the **bonus**. Either way each round yields `accepted + 1` tokens for one target pass.

**Exercise 2.** Write `accept(choices, draft_tokens)`: given the target's argmax for the `k + 1`
judging rows (`choices`, shape `[k + 1]`) and the k draft tokens, return `(n, next_token)`: the number
of leading draft tokens that match, and the target's token that follows them (correction or bonus).
"""),
        code("""
def accept(choices, draft_tokens):
    ### BEGIN SOLUTION
    k = draft_tokens.numel()
    n = 0
    while n < k and int(choices[n]) == int(draft_tokens[n]):
        n += 1
    return n, int(choices[n])
    ### END SOLUTION
"""),
        code("""
def _accept_ok():
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        k = int(torch.randint(1, 8, (1,), generator=g))
        choices = torch.randint(0, 3, (k + 1,), generator=g)   # small alphabet: many matches
        draft = torch.randint(0, 3, (k,), generator=g)
        logits = torch.nn.functional.one_hot(choices, 5).float()
        expected = accept_greedy(logits, draft)
        if accept(choices, draft) != (expected.num_accepted, expected.next_token):
            print("differs for choices", choices.tolist(), "draft", draft.tolist())
            return False
    return True

nb.check(_accept_ok, "the longest matching prefix, then the correction or the bonus token, on 200 random cases.",
         "count matches from the left and stop at the first mismatch; the next token is choices[n] in both cases.")
""", check=True),
        md("""
The kit's decoder records every round (`out.steps`). `render_html` colours the result: **green**
accepted draft tokens, **red struck-through** rejected ones (never part of the text), **orange**
corrections and **blue** bonus tokens. Hover a token to see its round.
"""),
        code("""
out = sd.speculative_decode(pair.target, pair.draft, prompt_ids, max_new_tokens=MAX_NEW_TOKENS,
                            num_speculative_tokens=K, use_cache=False)
display(HTML(render_html(out, tok, prompt_ids.shape[1], steps=True, max_rows=8)))
kinds = [step.target_token_kind for step in out.steps]
print(f"{len(out.steps)} rounds: {kinds.count('correction')} ended with a correction, {kinds.count('bonus')} with a bonus")
""", ignore=True),
        md("""
## 4. The whole loop, without a cache

**Exercise 3.** Complete `speculative_no_cache`. Each round: the drafter proposes up to k tokens
(never more than the tokens still wanted minus one, leaving room for the target's token); the
target runs **once** over text + draft; `judge_rows` and `accept` decide; append the accepted draft
tokens and the target's token; tell the drafter how much of its text survived
(`drafter.rollback(number_of_kept_tokens)`). No KV cache for the target: every round re-reads the
whole text (notebook 04 fixes that). To keep it short, the loop ignores end-of-text tokens and
always makes `max_new_tokens`; the check compares it with greedy decoding up to greedy's length.
"""),
        code("""
@torch.inference_mode()
def speculative_no_cache(target, drafter, input_ids, k, max_new_tokens):
    ids = input_ids
    end = input_ids.shape[1] + max_new_tokens
    drafter.reset()
    while ids.shape[1] < end:
        ### BEGIN SOLUTION
        start = ids.shape[1]
        draft = drafter.propose(ids, min(k, end - start - 1)).tokens
        logits = target(torch.cat([ids, draft.view(1, -1)], dim=1)).logits[0]
        n, next_token = accept(judge_rows(logits, start, draft.numel()).argmax(-1), draft)
        kept = torch.cat([draft[:n], torch.tensor([next_token], device=ids.device)])
        drafter.rollback(start + n)
        ids = torch.cat([ids, kept.view(1, -1)], dim=1)
        ### END SOLUTION
    return ids
"""),
        code("""
def same_text(mine, greedy):
    # Equal up to greedy's length (greedy stops early at an end-of-text token; our loop does not).
    return mine.shape[1] >= greedy.shape[1] and torch.equal(mine[:, :greedy.shape[1]], greedy)

def _equal_to_greedy():
    for text in prompts[:3]:
        ids = pair.encode(text)
        mine = speculative_no_cache(pair.target, drafter, ids, K, MAX_NEW_TOKENS)
        greedy = sd.greedy_decode(pair.target, ids, max_new_tokens=MAX_NEW_TOKENS).sequences
        hf = pair.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=MAX_NEW_TOKENS)
        if not (same_text(mine, greedy) and torch.equal(greedy, hf)):
            return False
    return True

nb.check(_equal_to_greedy, "speculative decoding gives exactly the target's greedy text (ours and HF generate) on every prompt.",
         "compare your output with sd.greedy_decode token by token; look for the first position that differs.")
""", check=True),
        md("""
Equality with greedy decoding is the correctness test for every speculative decoder: the draft may
only change *how fast* the text comes, never *which* text. (The kit's loop is
`sd.speculative_decode(..., use_cache=False)`; it passes the same test.)

## 5. Explore

The token explorer runs the kit's decoder with your settings. Try k = 1 and k = 16, a prompt the
draft knows well and one it does not, the prompt-lookup drafter on the repetitive prompt, and a
temperature above 0 (then verification switches to rejection sampling: see notebook 06).
"""),
        code("""
explorer = token_explorer(pair, prompts=prompts, max_new_tokens=MAX_NEW_TOKENS)
explorer
""", ignore=True),
    ]


# --------------------------------------------------------------------------- 04


def nb04():
    f = "04_kv_cached_verification.ipynb"
    return [
        header(f, "04 · Verification with a KV cache", [
            "what a KV cache holds: one key and one value tensor per layer, and their shapes",
            "rolling the cache back (cropping) after rejected draft tokens",
            "the cached speculative loop, asserted equal to greedy decoding",
            "how the time per token grows with the text without a cache, and stays flat with one",
        ], intro="""
Notebook 03's loop re-reads the whole text every round. Attention only needs each earlier token's
*key* and *value* vectors, which never change once computed: keep them in a cache, and each round
feeds only the new positions. The twist in speculative decoding is that some cached positions turn
out to be rejected draft tokens, and must be thrown away.
"""),
        *setup_cells("""
from IPython.display import HTML, Markdown, display
from specdec_helpers.core.timing import timed
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.core.drafters import ModelDrafter
from specdec_helpers.core.cache import cache_length, crop_cache, new_cache
from specdec_helpers.core.verify import accept_greedy, score_draft
from specdec_helpers.present.widgets import render_html
""", params="K = 4\nMAX_NEW_TOKENS = 40\nLENGTHS = [8, 32, 64, 128, 192]  # text lengths for the timing curve\nTIMING_REPEATS = 5"),
        code(LOAD_PAIR + """
prompts = nb.prompts_for(pair)
prompt_ids = pair.encode(prompts[0])
drafter = ModelDrafter(pair.draft) if isinstance(pair.draft, torch.nn.Module) else pair.draft
config = pair.target.config
""", ignore=True),
        md("""
## 1. Anatomy of a KV cache

Run the target over the prompt with an empty `DynamicCache`. Afterwards the cache has one entry
per layer, each holding a key and a value tensor of shape
`[batch, key/value heads, cached positions, head dimension]`.
"""),
        code("""
cache = new_cache(pair.target)
with torch.inference_mode():
    pair.target(input_ids=prompt_ids, past_key_values=cache, use_cache=True)
rows = ["| layer | keys | values |", "|---|---|---|"]
for i, layer in enumerate(cache.layers):
    rows.append(f"| {i} | {tuple(layer.keys.shape)} | {tuple(layer.values.shape)} |")
display(Markdown("\\n".join(rows)))
print("cached positions:", cache_length(cache), "= prompt length", prompt_ids.shape[1])
"""),
        md("""
**Exercise 1.** Write `cache_bytes(cache)`: the memory the cache's key and value tensors take, in
bytes (`tensor.numel() * tensor.element_size()`), summed over all layers. Then see how it compares
with the formula `2 × layers × kv_heads × head_dim × positions × bytes per number`.
"""),
        code("""
def cache_bytes(cache) -> int:
    ### BEGIN SOLUTION
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    ### END SOLUTION
"""),
        code("""
heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
formula = 2 * config.num_hidden_layers * heads * head_dim * cache_length(cache) * cache.layers[0].keys.element_size()
nb.check(lambda: cache_bytes(cache) == formula,
         f"{cache_bytes(cache)} bytes = 2 x {config.num_hidden_layers} layers x {heads} heads x {head_dim} dims x "
         f"{cache_length(cache)} positions x {cache.layers[0].keys.element_size()} bytes.",
         "sum numel() * element_size() over layer.keys and layer.values for every layer in cache.layers.")
""", check=True),
        md("""
## 2. Rollback: cropping rejected positions

Verification feeds the draft tokens through the target **with** the cache, so afterwards the cache
holds them all, accepted or not. The rejected ones must go before the next round, or the target
would attend to text that is not there. `crop_cache` keeps the first `n` positions; it is the only
function in the kit that touches cache internals, because this API changed across transformers
versions (5.x's `DynamicCache.crop` takes a negative number of positions to *remove*).
"""),
        code("""
import inspect
print(inspect.getsource(crop_cache))
"""),
        code("""
start = prompt_ids.shape[1]
drafter.reset()
draft_tokens = drafter.propose(prompt_ids, K).tokens
logits = score_draft(pair.target, prompt_ids, draft_tokens, cache)   # feeds only the K draft tokens
result = accept_greedy(logits, draft_tokens)
print(f"after verification: {cache_length(cache)} cached positions (prompt {start} + draft {K})")
print(f"accepted {result.num_accepted} of {K}; keep prompt + accepted = {start + result.num_accepted} positions")
crop_cache(cache, start + result.num_accepted)
print(f"after rollback:     {cache_length(cache)} cached positions; the target's token "
      f"{tok.decode([result.next_token])!r} is fed at the start of the next round")
"""),
        md("""
**Exercise 2.** Write `rollback(cache, n_kept)` yourself with `cache.crop`, which (in transformers
5.x) takes **minus the number of positions to remove**. `cache.get_seq_length()` gives the current
length. Do nothing if there is nothing to remove.
"""),
        code("""
def rollback(cache, n_kept):
    ### BEGIN SOLUTION
    drop = cache.get_seq_length() - n_kept
    if drop > 0:
        cache.crop(-drop)
    ### END SOLUTION
"""),
        code("""
@torch.inference_mode()
def _rollback_ok():
    text = sd.greedy_decode(pair.target, prompt_ids, max_new_tokens=6).sequences
    c = new_cache(pair.target)
    pair.target(input_ids=text, past_key_values=c, use_cache=True)        # cache the whole text
    rollback(c, prompt_ids.shape[1])                                         # drop the last 6 positions
    rollback(c, prompt_ids.shape[1])                                         # a second call changes nothing
    if cache_length(c) != prompt_ids.shape[1]:
        return False
    # Feeding the dropped tokens again must give exactly what a fresh pass gives: no stale entries left.
    again = pair.target(input_ids=text[:, prompt_ids.shape[1]:], past_key_values=c, use_cache=True).logits
    fresh = pair.target(input_ids=text).logits[:, prompt_ids.shape[1]:]
    return torch.allclose(again, fresh, atol=1e-4)

nb.check(_rollback_ok, "the cache is cut to n_kept positions and behaves exactly like a fresh one.",
         "compute drop = cache.get_seq_length() - n_kept and call cache.crop(-drop) when drop > 0.")
""", check=True),
        md("""
## 3. The cached loop

Compared with notebook 03's loop, two lines change: the target is called with the cache and only
the positions the cache does not hold yet (`score_draft` does this: the new last token plus the k
draft tokens), and after verification the cache is rolled back to the kept text. Read
`score_draft`:
"""),
        code("""
print(inspect.getsource(score_draft))
"""),
        md("""
**Exercise 3.** Complete the cached loop: score the draft with `score_draft(target, ids, draft,
cache)`, accept with `accept_greedy`, then roll back **both** caches (the target's with your
`rollback`, the drafter's with `drafter.rollback`) to `start + accepted` positions and append
`result.tokens`.
"""),
        code("""
@torch.inference_mode()
def speculative_cached(target, drafter, input_ids, k, max_new_tokens):
    ids, cache = input_ids, new_cache(target)
    end = input_ids.shape[1] + max_new_tokens
    drafter.reset()
    fed = 0
    while ids.shape[1] < end:
        start = ids.shape[1]
        draft = drafter.propose(ids, min(k, end - start - 1)).tokens
        ### BEGIN SOLUTION
        before = cache_length(cache)
        logits = score_draft(target, ids, draft, cache)
        fed += start - before + draft.numel()
        result = accept_greedy(logits, draft)
        rollback(cache, start + result.num_accepted)
        drafter.rollback(start + result.num_accepted)
        ids = torch.cat([ids, result.tokens.view(1, -1)], dim=1)
        ### END SOLUTION
    return ids, fed
"""),
        code("""
def _cached_equal():
    for text in prompts[:3]:
        ids = pair.encode(text)
        mine, fed = speculative_cached(pair.target, drafter, ids, K, MAX_NEW_TOKENS)
        greedy = sd.greedy_decode(pair.target, ids, max_new_tokens=MAX_NEW_TOKENS).sequences
        kit = sd.speculative_decode(pair.target, pair.draft, ids, max_new_tokens=MAX_NEW_TOKENS,
                                    num_speculative_tokens=K, use_cache=True).sequences
        same = mine.shape[1] >= greedy.shape[1] and torch.equal(mine[:, :greedy.shape[1]], greedy)
        if not (same and torch.equal(kit, greedy)):  # (greedy stops at end-of-text; our loop does not)
            return False
    return True

nb.check(_cached_equal, "the cached loop gives exactly the target's greedy text (and so does the kit's).",
         "roll back to start + result.num_accepted (not start + k); feed nothing the cache already holds.")
""", check=True),
        code("""
ids = pair.encode(prompts[0])
_, fed = speculative_cached(pair.target, drafter, ids, K, MAX_NEW_TOKENS)
out = sd.speculative_decode(pair.target, pair.draft, ids, max_new_tokens=MAX_NEW_TOKENS, num_speculative_tokens=K)
no_cache_positions = sum(ids.shape[1] + sum(len(s.emitted) for s in out.steps[:i]) + len(s.draft)
                         for i, s in enumerate(out.steps))
print(f"positions the target processed: {fed} with the cache, {no_cache_positions} without "
      f"({no_cache_positions / fed:.1f}x more work)")
display(HTML(render_html(out, tok, ids.shape[1])))
""", ignore=True),
        md("""
## 4. Time per token as the text grows

Without a cache, producing the token after `L` tokens means a pass over all `L`: the cost grows
with the text (and attention itself grows with `L²`). With a cache it is a pass over one new
position that attends to `L` cached ones: nearly flat. Measured here for one greedy step at
several text lengths (median of `TIMING_REPEATS`):
"""),
        code("""
import matplotlib.pyplot as plt

limit = getattr(config, "max_position_embeddings", 2048)
lengths = [L for L in LENGTHS if L < limit]
text = torch.randint(0, len(tok), (1, max(lengths) + 1), generator=torch.Generator().manual_seed(0)).to(pair.device)

@torch.inference_mode()
def step_time(L, cached):
    c = new_cache(pair.target)
    if cached:
        pair.target(input_ids=text[:, :L], past_key_values=c, use_cache=True)   # prefill (not timed)
    def one_step():
        if cached:
            pair.target(input_ids=text[:, L:L + 1], past_key_values=c, use_cache=True, logits_to_keep=1)
            crop_cache(c, L)
        else:
            pair.target(input_ids=text[:, :L + 1], use_cache=False, logits_to_keep=1)
    times = [timed(one_step, pair.device)[1] for _ in range(TIMING_REPEATS)]
    return sorted(times)[len(times) // 2]

step_time(lengths[0], True); step_time(lengths[0], False)   # warm-up
with_cache = [step_time(L, True) * 1e3 for L in lengths]
without = [step_time(L, False) * 1e3 for L in lengths]
fig, ax = plt.subplots(figsize=(5, 3.4))
ax.plot(lengths, without, "s--", label="no cache: re-read all L tokens")
ax.plot(lengths, with_cache, "o-", label="KV cache: one new token")
ax.set_xlabel("tokens already in the text (L)"); ax.set_ylabel("time for the next token (ms)")
ax.set_ylim(bottom=0); ax.legend(loc="upper left"); ax.set_title("Time per token as the text grows")
plt.show()
for L, a, b in zip(lengths, without, with_cache):
    print(f"L = {L:4d}: no cache {a:7.2f} ms, cache {b:6.2f} ms  ({a / b:4.1f}x)")
""", ignore=True),
        md("""
And the whole speculative run, both ways (same text, so only the time differs):
"""),
        code("""
def run_time(use_cache, repeats=3):
    times = []
    for _ in range(repeats):
        out = sd.speculative_decode(pair.target, pair.draft, prompt_ids, max_new_tokens=MAX_NEW_TOKENS,
                                    num_speculative_tokens=K, use_cache=use_cache)
        times.append(out.stats.wall_time_s)
    return sorted(times)[len(times) // 2], out

run_time(True, 1); run_time(False, 1)  # warm-up
t_cache, out_cache = run_time(True)
t_plain, out_plain = run_time(False)
assert torch.equal(out_cache.sequences, out_plain.sequences)
print(f"speculative, KV cache : {out_cache.stats.new_tokens / t_cache:7.1f} tokens/s")
print(f"speculative, no cache : {out_plain.stats.new_tokens / t_plain:7.1f} tokens/s  "
      f"-> the cache is {t_plain / t_cache:.2f}x faster at {MAX_NEW_TOKENS} new tokens")
""", ignore=True),
        md("""
**What to take away.** The cache turns each round's cost from "the whole text" into "k + 1 new
positions", and the gap widens as the text grows. With a tiny model and short texts the fixed cost
per call dominates and the gap is small; with a real model and long outputs it is large. The price
is bookkeeping: after every verification, roll the caches back to the text that was kept.

Next: **05 · Benchmarking**: measuring all of this fairly, and choosing k.
"""),
    ]


# --------------------------------------------------------------------------- 05


def nb05():
    f = "05_benchmarking.ipynb"
    return [
        header(f, "05 · Benchmarking speculative decoding", [
            "how to time decoders fairly: warm-up, device sync, interleaved runs, medians",
            "a sweep over k ∈ {2, 4, 8, 16}: speed-up and acceptance rate against k",
            "the theory (Leviathan et al. 2023) next to the measurements, and why they differ",
            "exporting figures and tables for a report",
        ], intro="""
A speed-up is a ratio of two noisy timings. Measured carelessly (one run, no warm-up, the baseline
run first while the machine is still cold), it can be off by more than the effect itself: PA3
reports ranged from 0.34x to 2.3x for similar pairs. This notebook uses the kit's harness and
explains each of its choices.
"""),
        *setup_cells("""
import inspect
from IPython.display import Markdown, display
from specdec_helpers.measure import bench
from specdec_helpers.present import plots, report
from specdec_helpers.models.pairs import load_pair
""", params="""KS = [2, 4, 8, 16]
MAX_NEW_TOKENS = 32   # per run; use 100 on a GPU
REPEATS = 2           # timed runs per method (interleaved); use 5 for a report
N_PROMPTS = 2
METHODS = ["hf_greedy", "greedy", "spec_cached"]  # add "spec_vectorized", "hf_assisted" to compare
EXPORT_DIR = nb.export_dir()                        # report/ in a checkout, $SPECDEC_EXPORT_DIR if set"""),
        code(LOAD_PAIR + """
prompts = nb.prompts_for(pair, N_PROMPTS)
encoded = [(p, pair.encode(p)) for p in prompts]
""", ignore=True),
        md("""
## 1. The harness

Four rules, each one a function in `bench.py`:

1. **Warm up** every method first: the first calls pay for memory allocation, kernel selection
   and caches; they say nothing about steady-state speed.
2. **Synchronize the device** around each timing: GPU work is queued asynchronously, and without
   a sync the timer measures the launch, not the work.
3. **Interleave** the methods (A B C A B C ...) instead of running all of A, then all of B, so slow
   drift of the machine (other jobs, clock changes) hits every method alike.
4. Report **medians** and their spread over several runs; one slow run skews a mean.

And one check: every method's output is compared with Hugging Face's greedy `generate`. A
"speed-up" that changes the text is a bug.
"""),
        code("""
print(inspect.getsource(timing.timed))
print(inspect.getsource(timing.interleaved_order))
print(timing.interleaved_order(["hf_greedy", "greedy", "spec_cached"], 2))
"""),
        md("""
## 2. One prompt

`bench.benchmark` returns the same keys PA3's `benchmark()` did (`speculative`, `baseline`,
`speedup`, `latency_reduction`, `acceptance_rate`), plus per-method details. The baseline is HF
`generate` (greedy).
"""),
        code("""
text, ids = encoded[0]
one = bench.benchmark(pair.target, pair.draft, ids, num_speculative_tokens=pair.num_speculative_tokens,
                      max_new_tokens=MAX_NEW_TOKENS, repeats=REPEATS, methods=METHODS)
bench.print_pa3(one)
for name, m in one["methods"].items():
    if "median_time" in m:
        print(f"{results.METHOD_LABELS[name]:28s} median {m['median_time'] * 1e3:8.1f} ms  "
              f"speedup {m.get('speedup', float('nan')):5.2f}x  identical to HF greedy: {m['identical']}")
""", ignore=True),
        code("""
nb.check(all(m["identical"] for m in one["methods"].values() if "identical" in m),
         "every method produced exactly HF greedy's tokens, so the timings compare like with like.",
         "a method's output differs from greedy decoding: fix correctness before measuring speed.")
""", check=True),
        md("""
## 3. A sweep over k

Larger k means more tokens per target pass when the draft is right, but more wasted draft work
when it is wrong. The sweep runs every k on every prompt (interleaved within each cell), measures
the target's forward-cost curve and the draft/target step-cost ratio, and pools the prompts.
"""),
        code("""
case = bench.Case(preset=pair.preset or PRESET, drafter=bench.draft_label(pair.draft), target=pair.target,
                  draft=pair.draft, prompts=encoded)
results = bench.run_sweep([case], KS, max_new_tokens=MAX_NEW_TOKENS, repeats=REPEATS, methods=METHODS,
                          cost_repeats=3, progress=False)
results["env"] = results.environment(pair.device, pair.dtype, pair.preset)
display(Markdown(tables.to_markdown(*tables.sweep_table(results))))
""", ignore=True),
        code("""
display(plots.plot_speedup_vs_k(results))
display(plots.plot_acceptance_vs_k(results))
""", ignore=True),
        md("""
Acceptance falls as k grows, for a simple reason: draft token `j` can only be accepted if tokens
`0 .. j-1` were. The per-position view shows it (and it is why PA3's "acceptance rate" is lower than
the per-token agreement α the theory uses):
"""),
        code("""
display(plots.plot_acceptance_by_position(results))
""", ignore=True),
        md("""
## 4. Theory vs measurement

If each draft token is accepted independently with probability α, one round yields on average

$$E[\\text{tokens per target pass}] = \\frac{1 - \\alpha^{k+1}}{1 - \\alpha}$$

tokens (Leviathan et al. 2023, eq. 1). With a draft step costing `c` target steps, a round costs
`k·c + 1` target steps if verification costs one step, so the speed-up is
`E[tokens] / (k·c + 1)`. Notebook 01 measured that verification costs `v` steps, a bit more than 1:
the refined prediction divides by `k·c + v` instead.

**Exercise 1.** Write `expected_tokens(alpha, k)` (mind α = 1, where the formula is 0/0: every round
yields k + 1 tokens).
"""),
        code("""
def expected_tokens(alpha: float, k: int) -> float:
    ### BEGIN SOLUTION
    if alpha >= 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)
    ### END SOLUTION
"""),
        code("""
nb.check(lambda: all(abs(expected_tokens(a, k) - theory.expected_tokens_per_step(a, k)) < 1e-9
                     for a in (0.0, 0.3, 0.8, 0.99, 1.0) for k in (1, 2, 4, 8, 16)),
         "expected tokens per pass match the formula, including alpha = 0 (1 token) and alpha = 1 (k + 1).",
         "(1 - alpha**(k+1)) / (1 - alpha), and k + 1 when alpha == 1.")
""", check=True),
        code("""
rows = ["| k | α | c | v | E[tokens] | measured tokens/pass | predicted | refined | measured (vs our greedy) |",
        "|---|---|---|---|---|---|---|---|---|"]
for r in results["theory"]:
    rows.append(f"| {r['k']} | {r['alpha']:.2f} | {r['c']:.2f} | {r['v']:.2f} | {expected_tokens(r['alpha'], r['k']):.2f} "
                f"| {r['measured_tokens_per_step']:.2f} | {r['predicted_speedup']:.2f}x | {r['refined_speedup']:.2f}x "
                f"| {r['measured_speedup_vs_greedy'] or float('nan'):.2f}x |")
display(Markdown("\\n".join(rows)))
display(plots.plot_theory_vs_measured(results))
""", ignore=True),
        md("""
Reading the gap between theory and measurement:

- **Tokens per pass** usually match the formula well: it only assumes a constant α.
- **Time** does not follow as neatly. The formula counts model passes only; the loop itself
  (Python, tensor bookkeeping, cache cropping) costs time too, and with a tiny CPU model that fixed
  cost is comparable to a forward pass. This is the honest reason a small pair on a CPU can show
  a modest speed-up or none, while a 1.4B target on a GPU shows 1.5-2x with the same loop.
- α is not constant: it depends on the text (repetitive text is easy), and it is measured from
  few runs here.

**Exercise 2.** Which k gave the highest measured speed-up? Write `best_k(results)` using
`results["summary"]`: rows with `method == "spec_cached"` carry `k` and `speedup` (vs HF greedy).
"""),
        code("""
def best_k(results) -> int:
    ### BEGIN SOLUTION
    rows = [r for r in results["summary"] if r["method"] == "spec_cached" and r.get("speedup")]
    return max(rows, key=lambda r: r["speedup"])["k"]
    ### END SOLUTION
"""),
        code("""
nb.check(lambda: best_k(results) == results.best_k(results),
         "you found the k with the highest measured speed-up.",
         "filter results['summary'] to the spec_cached rows and take the k of the row with the largest 'speedup'.")
""", check=True),
        code("""
print(f"best k here: {best_k(results)} (the preset's default is {pair.num_speculative_tokens})")
""", ignore=True),
        md("""
## 5. Export

Figures (PNG for the web, PDF for LaTeX), tables (Markdown and CSV) and the raw results (JSON, with
the environment: versions, hardware, commit) go to `EXPORT_DIR`: `report/` at the root of your
checkout, or `/content/report` on Colab (download it from the file browser). The notebook tests
point `SPECDEC_EXPORT_DIR` at a temporary folder so a test run leaves nothing behind.
"""),
        code("""
EXPORT_DIR.mkdir(parents=True, exist_ok=True)
json_path = results.save_results(results, EXPORT_DIR / "results" / f"notebook05_{(pair.preset or 'custom').replace('/', '-')}.json")
figures = plots.save_all_figures(results, EXPORT_DIR / "figures")
tables = tables.write_tables(results, EXPORT_DIR / "tables")
print("results:", json_path)
print(len(figures), "figure files, e.g.", sorted(p.name for p in figures)[:4])
print(len(tables), "table files:", sorted(p.name for p in tables))
""", ignore=True),
        code("""
nb.check(json_path.is_file() and any(p.suffix == ".png" for p in figures) and tables,
         f"results, figures and tables written to {EXPORT_DIR.name}/.",
         "the export did not write its files; check that EXPORT_DIR is writable.")
""", ignore=True),
        md("""
**Summary.** Fair timing needs warm-up, sync, interleaving and medians; every output is checked
against greedy decoding; the best k balances acceptance (falling with k) against draft cost (rising
with k); and the theory predicts tokens per pass well but needs the measured verify cost and loop
overhead to predict time. On a Colab GPU with `PRESET = "pythia-1.4b/160m"` rerun this notebook
with `MAX_NEW_TOKENS = 100` and `REPEATS = 5` to reproduce the PA3 numbers.
"""),
    ]


# --------------------------------------------------------------------------- 06


def nb06():
    f = "06_speculative_sampling.ipynb"
    return [
        header(f, "06 · Speculative sampling: rejection sampling keeps the target's distribution", [
            "why checking a *sampled* draft token by exact match changes the output distribution (lossy)",
            "the accept/reject rule min(1, p/q) and the residual distribution max(p − q, 0), on a worked example",
            "an empirical check: speculative sampling and plain target sampling give the same histogram",
            "how the acceptance rate changes with the temperature, and why temperature 0 is greedy decoding",
        ], intro="""
Notebooks 03-05 decoded greedily: the draft's token is kept when it equals the target's argmax.
With sampling (temperature > 0) there is no single "right" token any more: the target has a
*distribution* `p`, the draft a distribution `q`, and the output must follow `p` exactly, whatever
the draft does. Leviathan et al. (2023) and Chen et al. (2023) showed how: rejection sampling.
"""),
        *setup_cells("""
import matplotlib.pyplot as plt
from IPython.display import HTML, display
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.verify import accept_sampled
from specdec_helpers.present.widgets import render_html
""", params="""K = 4
MAX_NEW_TOKENS = 40
TEMPERATURES = [0.0, 0.3, 0.7, 1.0, 1.5]
N_PROMPTS = 2
DRAWS = 2000   # samples per histogram
SEED = 0"""),
        md("""
## 1. A tiny vocabulary

Five tokens, a target distribution `p` and a draft distribution `q` that disagree: the draft
likes "a" much more than the target does, and "the" much less.
"""),
        code("""
VOCAB = ["the", "a", "cat", "dog", "sat"]
p = torch.tensor([0.45, 0.25, 0.15, 0.10, 0.05])   # target
q = torch.tensor([0.20, 0.50, 0.10, 0.15, 0.05])   # draft

def bars(ax, dists, labels, title):
    width = 0.8 / len(dists)
    for i, (d, label) in enumerate(zip(dists, labels)):
        ax.bar([x + i * width for x in range(len(VOCAB))], d.tolist(), width, label=label)
    ax.set_xticks([x + width * (len(dists) - 1) / 2 for x in range(len(VOCAB))], VOCAB)
    ax.set_ylabel("probability"); ax.set_title(title); ax.legend()

fig, ax = plt.subplots(figsize=(6, 3))
bars(ax, [p, q], ["target p", "draft q"], "two distributions over five tokens")
plt.show()
"""),
        md("""
## 2. Exact match is lossy

The greedy rule, used with a sampled draft: draw `x ~ q`, keep it if it is the target's argmax,
otherwise replace it by a token sampled from `p`. Its output distribution can be computed exactly:
`P(out = a) = q(a)·[a = argmax p] + (1 − q(argmax p))·p(a)`.
"""),
        code("""
def exact_match_output(p, q):
    best = int(p.argmax())
    out = (1 - q[best]) * p           # rejected: the target samples
    out[best] += q[best]              # accepted: the draft's token, only when it is the argmax
    return out

lossy = exact_match_output(p, q)
fig, ax = plt.subplots(figsize=(6, 3))
bars(ax, [p, lossy], ["target p", "exact-match output"], "the exact-match rule over-produces the argmax")
plt.show()
print("target p          :", [round(v, 3) for v in p.tolist()])
print("exact-match output:", [round(v, 3) for v in lossy.tolist()])
print(f"total variation distance: {0.5 * (p - lossy).abs().sum():.3f}")
"""),
        md("""
The argmax "the" comes out far more often than the target wants, every other token less often:
a sampled text would read like a lower temperature than asked for. (Another rule, "keep `x` if
an independent target sample equals it", is exact but accepts only `Σ p·q` of the time.)

## 3. The rule: accept with probability min(1, p/q)

Draw `x ~ q`. Accept it with probability `min(1, p(x) / q(x))`: always when the target likes `x`
at least as much as the draft, sometimes when the draft over-proposes it. On a rejection, draw
from the **residual** `max(p − q, 0)`, normalised: exactly the mass the draft under-proposed.
Then `P(out = a) = q(a)·min(1, p(a)/q(a)) + P(reject)·residual(a) = min(p(a), q(a)) + max(p(a) − q(a), 0) = p(a)`.

**Exercise 1.** Write `acceptance_probability(p, q)`: the vector `min(1, p / q)` over the
vocabulary (use 1 where `q == 0`: such a token is never proposed anyway).
"""),
        code("""
def acceptance_probability(p, q):
    ### BEGIN SOLUTION
    ratio = torch.where(q > 0, p / q.clamp_min(1e-30), torch.ones_like(p))
    return ratio.clamp(max=1.0)
    ### END SOLUTION
"""),
        code("""
def _acceptance_ok():
    expected = torch.tensor([1.0, 0.5, 1.0, 2 / 3, 1.0])
    zero_q = acceptance_probability(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]))
    return torch.allclose(acceptance_probability(p, q), expected) and torch.allclose(zero_q, torch.tensor([0.5, 1.0]))

nb.check(_acceptance_ok, "min(1, p/q) per token, and 1 where the draft never proposes the token.",
         "divide p by q elementwise and clip at 1; torch.where(q > 0, ..., 1) avoids dividing by zero.")
""", check=True),
        md("""
**Exercise 2.** Write `residual(p, q)`: `max(p − q, 0)` normalised to sum to 1.
"""),
        code("""
def residual(p, q):
    ### BEGIN SOLUTION
    r = (p - q).clamp_min(0)
    return r / r.sum()
    ### END SOLUTION
"""),
        code("""
def _residual_ok():
    r = residual(p, q)
    a = acceptance_probability(p, q)
    rebuilt = q * a + (1 - (q * a).sum()) * r       # accepted mass + rejected mass times residual
    return torch.allclose(r, torch.tensor([0.25, 0.0, 0.05, 0.0, 0.0]) / 0.30) and torch.allclose(rebuilt, p)

nb.check(_residual_ok, "the residual is max(p - q, 0) normalised, and accept + reject together give back p exactly.",
         "clamp p - q at 0 (clamp_min(0)), then divide by its sum.")
""", check=True),
        code("""
a = acceptance_probability(p, q)
fig, axes = plt.subplots(1, 3, figsize=(12, 3))
bars(axes[0], [p, q], ["target p", "draft q"], "p and q")
axes[1].bar(VOCAB, a.tolist(), color="tab:green"); axes[1].set_ylim(0, 1.05)
axes[1].set_title("accept probability min(1, p/q)")
axes[2].bar(VOCAB, residual(p, q).tolist(), color="tab:orange")
axes[2].set_title("residual max(p - q, 0), normalised")
fig.tight_layout(); plt.show()
print(f"P(accept) = sum of min(p, q) = {torch.minimum(p, q).sum():.2f}   "
      f"(exact rule 'independent sample equals x': sum p*q = {(p * q).sum():.2f})")
"""),
        md("""
## 4. The kit's `accept_sampled`, checked empirically

`verify.accept_sampled(logits, draft_tokens, draft_probs, sampler)` implements the rule for k draft
tokens at once. Here k = 1 on the tiny vocabulary: `logits = log p`, a draft token drawn from `q`,
repeated `DRAWS` times with a seeded generator. Its first output token should be distributed like
plain samples from `p`.
"""),
        code("""
gen = torch.Generator().manual_seed(SEED)
sampler = Sampler(temperature=1.0, generator=gen)     # temperature 1: the probabilities are p itself
logits = torch.log(p).repeat(2, 1)                    # row 0 judges the draft token, row 1 = bonus
spec_counts, accepted = torch.zeros(len(VOCAB)), 0
for _ in range(DRAWS):
    x = torch.multinomial(q, 1, generator=gen)
    result = accept_sampled(logits, x, q.view(1, -1), sampler)
    spec_counts[int(result.tokens[0])] += 1
    accepted += result.num_accepted
target_counts = torch.bincount(torch.multinomial(p, DRAWS, replacement=True, generator=gen), minlength=len(VOCAB)).float()

fig, ax = plt.subplots(figsize=(6, 3))
bars(ax, [p, target_counts / DRAWS, spec_counts / DRAWS], ["p (exact)", "target sampling", "speculative sampling"],
     f"{DRAWS} draws each")
plt.show()
print(f"acceptance: {accepted / DRAWS:.3f} measured, {torch.minimum(p, q).sum():.3f} expected")
print(f"largest gap to p: target sampling {(target_counts / DRAWS - p).abs().max():.3f}, "
      f"speculative {(spec_counts / DRAWS - p).abs().max():.3f} (sampling noise is about {(0.25 / DRAWS) ** 0.5:.3f})")
"""),
        code("""
nb.check(lambda: (spec_counts / DRAWS - p).abs().max() < 0.05,
         "speculative sampling's histogram matches the target's distribution within sampling noise.",
         "the first output token should follow p; check accept_sampled's inputs (logits = log p, draft_probs = q).")
""", check=True),
        md("""
## 5. Acceptance vs temperature on the toy pair

`sd.speculative_decode(..., temperature=T, generator=...)` warps both models' logits the same way
(temperature, then top-k, then top-p) and verifies with `accept_sampled`. At T = 0 it is greedy
matching. Higher temperatures flatten both `p` and `q`; how acceptance moves depends on how the two
models disagree, so we measure it (a fixed seed, the same prompts for every T).
"""),
        code(LOAD_PAIR + """
prompts = nb.prompts_for(pair, N_PROMPTS)
encoded = [pair.encode(text) for text in prompts]
""", ignore=True),
        code("""
rows = []
for T in TEMPERATURES:
    gen = torch.Generator().manual_seed(SEED)
    accepted = proposed = new = calls = 0
    for ids in encoded:
        out = sd.speculative_decode(pair.target, pair.draft, ids, max_new_tokens=MAX_NEW_TOKENS,
                                    num_speculative_tokens=K, temperature=T, generator=gen)
        accepted += out.stats.accepted; proposed += out.stats.proposed
        new += out.stats.new_tokens; calls += out.stats.target_calls
    rows.append(dict(T=T, acceptance=accepted / proposed, tokens_per_call=new / calls))
    print(f"T = {T:3.1f}: acceptance {accepted / proposed:.2f}  ({accepted}/{proposed} draft tokens), "
          f"{new / calls:.2f} tokens per target call")

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot([r["T"] for r in rows], [r["acceptance"] for r in rows], "o-", label="acceptance rate")
ax.set_xlabel("temperature"); ax.set_ylabel("accepted / proposed"); ax.set_ylim(0, 1.05)
ax.set_title(f"{pair.preset or PRESET}: k = {K}, {MAX_NEW_TOKENS} new tokens x {len(encoded)} prompts")
plt.show()
""", ignore=True),
        md("""
At T = 0 the draft's argmax must equal the target's argmax; with sampling the draft's token is kept
with probability `min(1, p/q)`, and the expected acceptance is `Σ min(p, q)`, the overlap of the two
distributions. With only two short prompts and one seed these numbers are noisy: rerun with
another `SEED` to see how much they move.

## 6. Temperature 0 is greedy decoding

With `temperature=0` no random number is drawn at all: the result must equal the target's greedy
text, token for token, whatever the generator.
"""),
        code("""
def _t0_is_greedy():
    for ids in encoded:
        spec = sd.speculative_decode(pair.target, pair.draft, ids, max_new_tokens=MAX_NEW_TOKENS,
                                     num_speculative_tokens=K, temperature=0.0,
                                     generator=torch.Generator().manual_seed(SEED + 1))
        greedy = sd.greedy_decode(pair.target, ids, max_new_tokens=MAX_NEW_TOKENS).sequences
        if not torch.equal(spec.sequences, greedy):
            return False
    return True

nb.check(_t0_is_greedy, "at temperature 0 speculative decoding gives exactly the target's greedy text.",
         "temperature 0 must take the greedy path (argmax matching), never draw random numbers.")
""""", check=True),
        code("""
out = sd.speculative_decode(pair.target, pair.draft, encoded[0], max_new_tokens=MAX_NEW_TOKENS,
                            num_speculative_tokens=K, temperature=1.0, generator=torch.Generator().manual_seed(SEED))
display(HTML(render_html(out, tok, encoded[0].shape[1])))
""", ignore=True),
        md("""
**What to take away.** With sampling, "does the draft token match?" is the wrong question: the
right one is "how much more does the draft like this token than the target?". Accepting with
probability `min(1, p/q)` and resampling rejections from `max(p − q, 0)` makes the output follow
the target's distribution *exactly*, while keeping `Σ min(p, q)` of the draft's tokens, the most any
exact rule can keep. Draft and target must be warped identically (same temperature, top-k, top-p)
for this to hold: the kit's `Sampler` does both.

Next: **07 · Tree speculation**: several draft branches verified in one pass.
"""),
    ]


# --------------------------------------------------------------------------- 07


def nb07():
    f = "07_tree_speculation.ipynb"
    return [
        header(f, "07 · Tree speculation: several guesses in one verification pass", [
            "what a token tree is, drawn from the toy draft, with the branch the target keeps",
            "the tree attention mask: each node sees the prompt and its own ancestors only",
            "one tree round next to one chain round, and proof that tree decoding equals greedy decoding",
            "the measured gain: tokens per target call, tree vs chain at the same node budget",
        ], intro="""
A chain of k draft tokens loses everything after its first wrong guess. A **token tree** hedges:
at each depth the draft offers a few candidates, and the target scores all of them in **one**
forward pass, thanks to an attention mask that keeps the branches from seeing each other
(SpecInfer, Medusa, EAGLE all build on this). Greedy decoding only here: sampling with a tree needs
multi-draft rejection sampling, beyond this course.
"""),
        *setup_cells("""
import matplotlib.pyplot as plt
from IPython.display import HTML, display
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.core.cache import new_cache
from specdec_helpers.core.tree import (TokenTree, check_tree_support, compare_tree_chain, draft_tree,
                                  tree_attention_mask, tree_forward, tree_speculative_decode)
""", params="""TREE = (3, 2, 2, 1, 1)   # candidates kept per depth: 9 nodes, 5 deep
MAX_NEW_TOKENS = 32
N_PROMPTS = 2"""),
        code(LOAD_PAIR + """
prompts = nb.prompts_for(pair, N_PROMPTS)
encoded = [pair.encode(text) for text in prompts]
check_tree_support(pair.target)   # raises TreeUnsupportedError if the attention ignores custom masks
""", ignore=True),
        md("""
## 1. A token tree from the draft

`draft_tree` grows the tree level by level: at depth `d` it keeps the `TREE[d-1]` best paths by
total draft log-probability. Each level is one draft pass, so this tree costs 5 draft passes, like
a chain of 5 tokens, but proposes 9 tokens.
"""),
        code("""
ids = encoded[0]
tree, _, passes = draft_tree(pair.draft, new_cache(pair.draft), ids, TREE)
print(f"{len(tree)} nodes from {passes} draft passes")
for i, (token, parent, depth) in enumerate(zip(tree.tokens, tree.parents, tree.depths)):
    print(f"node {i}: depth {depth}, parent {parent:2d}, token {tok.decode([token])!r}")
"""),
        md("""
## 2. Verifying the whole tree in one pass

The target reads the prompt and all nodes at once (`tree_forward`). Row 0 of its output belongs to
the last prompt token and judges the depth-1 nodes; row `1 + i` belongs to node `i` and judges its
children (the tree's off-by-one). Walk down from the root: follow the child equal to the target's
argmax, stop when there is none. The argmax at the last kept node is the correction or bonus token.
"""),
        code("""
choices = tree_forward(pair.target, new_cache(pair.target), ids, tree, logits_to_keep=len(tree) + 1).argmax(-1).tolist()
path, node = [], -1
while (child := tree.child(node, choices[node + 1])) is not None:
    path.append(child)
    node = child
emitted = [tree.tokens[i] for i in path] + [choices[node + 1]]
print("kept nodes:", path, "->", repr(tok.decode([tree.tokens[i] for i in path])),
      "+ target token", repr(tok.decode(emitted[-1:])))
print(f"one target call gave {len(emitted)} tokens")
"""),
        code("""
def draw_tree(tree, path, root_text, extra=None, ax=None):
    # x = depth, y = order within the depth; kept branch in green, the target's own token in orange.
    ax = ax or plt.subplots(figsize=(11, 3.8))[1]
    rows = {}
    pos = {-1: (0, 0.0)}
    for i, d in enumerate(tree.depths):
        rows.setdefault(d, []).append(i)
    for d, nodes in rows.items():
        for j, i in enumerate(nodes):
            pos[i] = (d, (len(nodes) - 1) / 2 - j)
    kept = set(path)
    for i, parent in enumerate(tree.parents):
        (x0, y0), (x1, y1) = pos[parent], pos[i]
        on_path = i in kept
        ax.plot([x0, x1], [y0, y1], color="tab:green" if on_path else "0.7", lw=2.5 if on_path else 1, zorder=1)
    def box(xy, text, color):
        ax.text(*xy, text, ha="center", va="center", fontsize=9, zorder=2,
                bbox=dict(boxstyle="round,pad=0.3", fc=color, ec="0.3"))
    box(pos[-1], f"{root_text!r}\\n(root)", "0.9")
    for i, token in enumerate(tree.tokens):
        box(pos[i], f"{tok.decode([token])!r}\\n#{i}", "#b7e4b7" if i in kept else "white")
    if extra is not None:
        last = pos[path[-1]] if path else pos[-1]
        xy = (last[0] + 1, 1.6)   # above the tree (nodes sit at |y| <= 1), so it hides no node
        ax.plot([last[0], xy[0]], [last[1], xy[1]], "--", color="tab:orange", zorder=1)
        box(xy, f"{tok.decode([extra])!r}\\ntarget", "#ffd59e")
    ax.set_xlim(-0.6, max(tree.depths + [0]) + 1.6); ax.set_ylim(-1.6, 2.1)
    ax.set_xticks(range(max(tree.depths) + 2)); ax.set_xlabel("depth"); ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return ax

ax = draw_tree(tree, path, tok.decode(ids[0, -1:]), extra=emitted[-1])
ax.set_title(f"draft tree {list(TREE)}: green = kept by the target, orange = the target's own token")
plt.show()
"""),
        md("""
## 3. The tree attention mask

Every node sees the whole prompt, its ancestors and itself, never its siblings or cousins: then
its logits are exactly what a chain pass along its own branch would give. Its position id is
`prompt length − 1 + depth`, so siblings share a position. `tree_attention_mask` builds this
additive mask (0 = may attend, a large negative number = may not); here as an image, the
prompt's last columns on the left of the white line.
"""),
        code("""
L = ids.shape[1]
mask = tree_attention_mask(tree, L, 0, 0, len(tree), torch.float32)[0, 0]   # [L + N, L + N]
show_prefix = min(L, 6)
allowed = (mask[L:, L - show_prefix:] == 0).float()                         # node rows only
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw=dict(width_ratios=[show_prefix + len(tree), len(tree)]))
axes[0].imshow(allowed, cmap="Greens", vmin=0, vmax=1)
axes[0].axvline(show_prefix - 0.5, color="white", lw=3)
axes[0].set_xticks(range(show_prefix + len(tree)), [f"p{L - show_prefix + j}" for j in range(show_prefix)] + [f"#{i}" for i in range(len(tree))], fontsize=8)
axes[0].set_yticks(range(len(tree)), [f"#{i}" for i in range(len(tree))])
axes[0].set_title("mask rows of the nodes (green: may attend)")
axes[1].imshow(tree.ancestry().float(), cmap="Greens", vmin=0, vmax=1)
axes[1].set_xticks(range(len(tree)), [f"#{i}" for i in range(len(tree))]); axes[1].set_yticks(range(len(tree)), [f"#{i}" for i in range(len(tree))])
axes[1].set_title("node-to-node part: tree.ancestry()")
fig.tight_layout(); plt.show()
print("parents:", tree.parents)
"""),
        md("""
**Exercise 1.** Write `ancestor_mask(parents)`: a `[N, N]` bool tensor whose row `i` is `True` at
node `i` and at every ancestor of `i` (`parents[i] == -1` means node `i` hangs off the root; a parent
always comes before its children).
"""),
        code("""
def ancestor_mask(parents):
    ### BEGIN SOLUTION
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return mask
    ### END SOLUTION
"""),
        code("""
def _mask_ok():
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        t = TokenTree()
        for i in range(int(torch.randint(1, 12, (1,), generator=g))):
            parent = int(torch.randint(-1, len(t), (1,), generator=g)) if len(t) else -1
            t.add(i, parent)
        if not torch.equal(ancestor_mask(t.parents), t.ancestry()):
            print("differs for parents", t.parents)
            return False
    return torch.equal(ancestor_mask(tree.parents), tree.ancestry())

nb.check(_mask_ok, "each row marks the node and all its ancestors, on 50 random trees and the draft's tree.",
         "start row i from its parent's row (parents come first), then set the diagonal.")
""", check=True),
        md("""
## 4. One tree round vs one chain round

A chain as deep as the tree costs the same draft passes but proposes only the draft's favourite
branch (the first child at each depth). If the draft's favourite is wrong early, the chain keeps
little, while the tree may still hold the right token as a sibling.
"""),
        code("""
chain = tree.branch_from(0)   # the draft's top-1 branch: node 0, then first children
target_greedy = sd.greedy_decode(pair.target, ids, max_new_tokens=len(TREE) + 1).sequences[0, L:].tolist()
kept_chain = 0
while kept_chain < len(chain) and chain[kept_chain] == target_greedy[kept_chain]:
    kept_chain += 1
print("target's greedy text :", repr(tok.decode(target_greedy)))
print(f"chain (top-1 branch) : {tok.decode(chain)!r} -> keeps {kept_chain} + 1 = {kept_chain + 1} tokens")
print(f"tree ({len(tree)} nodes)       : {tok.decode(emitted[:-1])!r} -> keeps {len(path)} + 1 = {len(emitted)} tokens")
"""),
        md("""
## 5. The whole loop equals greedy decoding

`tree_speculative_decode` repeats the round: draft a tree, one target pass, walk, keep the branch
(gathering the kept positions in both KV caches), append the correction/bonus token. Like every
speculative decoder it must give exactly the target's greedy text.
"""),
        code("""
def _tree_equals_greedy():
    for x in encoded:
        out = tree_speculative_decode(pair.target, pair.draft, x, max_new_tokens=MAX_NEW_TOKENS, tree=TREE)
        greedy = sd.greedy_decode(pair.target, x, max_new_tokens=MAX_NEW_TOKENS).sequences
        if not torch.equal(out.sequences, greedy):
            return False
    return True

nb.check(_tree_equals_greedy, "tree speculative decoding gives exactly the target's greedy text on every prompt.",
         "the kept branch must follow the target's argmax at every node; check the cache gathering.")
""", check=True),
        md("""
## 6. The measured gain

`compare_tree_chain` runs greedy decoding, a chain as deep as the tree (same draft passes), a
chain with the tree's node budget (same number of tokens fed to the target) and the tree, on the
same prompts, and checks that all give the greedy text. The column to read is **tok/call**: new
tokens per target forward pass. Times on a tiny CPU model mostly measure Python overhead.
"""),
        code("""
rows = compare_tree_chain(pair, prompts=prompts, tree=TREE, max_new_tokens=MAX_NEW_TOKENS)
""", ignore=True),
        code("""
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar([r["method"] for r in rows], [r["tokens_per_target_call"] for r in rows],
       color=["0.6", "tab:blue", "tab:blue", "tab:green"])
ax.set_ylabel("new tokens per target call"); ax.set_title("tree vs chain")
plt.show()
best = max(rows, key=lambda r: r["tokens_per_target_call"])
print(f"most tokens per target call: {best['method']} ({best['tokens_per_target_call']:.2f})")
""", ignore=True),
        md("""
**Reading the result.** A tree pays off when the draft's top-1 guess is often wrong but its
top-2 or top-3 is right: the siblings catch what a chain would lose. When the draft is very good
(the toy draft was trained on the same small corpus as its target), a long chain with the same
node budget can keep as much or more, because all of its nodes sit on the branch that is usually
right. Wider trees also feed more tokens to the target per pass, which is almost free on a GPU
(notebook 01's cost curve) but not on a CPU. Try `TREE = (2, 2, 2, 2, 2)` or `(4, 2, 1)`.
"""),
    ]


NOTEBOOKS = {
    "01_model_init.ipynb": nb01,
    "02_draft_generation.ipynb": nb02,
    "03_vectorized_verification.ipynb": nb03,
    "04_kv_cached_verification.ipynb": nb04,
    "05_benchmarking.ipynb": nb05,
    "06_speculative_sampling.ipynb": nb06,
    "07_tree_speculation.ipynb": nb07,
}

SOLUTION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.S | re.M)


def strip_solutions(source: str) -> str:
    return SOLUTION.sub(lambda m: f'{m["indent"]}# YOUR CODE HERE\n{m["indent"]}raise NotImplementedError()\n', source)


def build(name: str, student: bool = False):
    nb = new_notebook(cells=NOTEBOOKS[name]())
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["colab"] = {"provenance": [], "toc_visible": True}
    nb.metadata["accelerator"] = "GPU"
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:02d}"  # stable ids: regenerating gives minimal diffs
        if student and cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
    nbformat.validate(nb)
    return nb


def execute(nb, path: Path, timeout: int = 600):
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in nb.cells:  # never save error outputs
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                raise RuntimeError(f"{path.name}: cell {cell['id']} raised {output['ename']}: {output['evalue']}")
        cell.get("metadata", {}).pop("execution", None)
    return nb


def keep_outputs(nb, old) -> None:
    """Regenerating without --execute keeps the saved outputs of every cell whose source is unchanged."""
    previous = {(c.get("id"), c.source): c for c in old.cells if c.cell_type == "code"}
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.get("id"), cell.source) in previous:
            match = previous[cell.get("id"), cell.source]
            cell.outputs, cell.execution_count = match.outputs, match.execution_count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="notebook file names or prefixes (default: all)")
    parser.add_argument("--execute", action="store_true", help="run each notebook (offline toy preset) and save outputs")
    parser.add_argument("--student", metavar="DIR", help="write copies without solutions to DIR")
    args = parser.parse_args(argv)
    names = [n for n in NOTEBOOKS if not args.names or any(n.startswith(p) for p in args.names)]
    os.environ.setdefault("SPECDEC_PRESET", "toy")
    os.environ.setdefault("SPECDEC_THREADS", "1")  # tiny models: one thread is faster and steadier
    if args.execute:
        import tempfile

        os.environ.setdefault("SPECDEC_EXPORT_DIR", tempfile.mkdtemp(prefix="specdec-export-"))
        os.environ.setdefault("PYTHONPATH", str(HERE.parent))
    out_dir = Path(args.student) if args.student else HERE
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        nb = build(name, student=bool(args.student))
        path = out_dir / name
        if args.execute and not args.student:
            t0 = time.perf_counter()
            execute(nb, path)
            print(f"{name}: executed in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        elif not args.student and path.exists():
            keep_outputs(nb, nbformat.read(path, as_version=4))
        nbformat.write(nb, path)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
