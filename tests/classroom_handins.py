"""Synthetic hand-ins for the class and similarity tests, built from the instructor's notebooks.

A student's answer is the code typed where the released stub says ``# YOUR CODE HERE``: `answer`
puts it into the stubbed cell, as a student editing the released notebook would. Besides the
reference, three authors (``A``, ``B``, ``C``) wrote every part on their own, each in a genuinely
different way (loops or tensor ops, other names, other order); all of them are correct.
Copies of the reference are made the way students disguise them: names renamed (`rename`),
independent lines swapped (`reorder`), comments and blank lines changed, dead code added.
"""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import textwrap
import tokenize
import zipfile
from pathlib import Path

import nbformat

from specdec_helpers.assignment.authoring.release import REGION, strip
from specdec_helpers.assignment.parts.cells import nbgrader
from specdec_helpers.assignment.grading.submission import reference_sources

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
#: The notebooks that hold graded parts (the others are not needed to grade with --no-nbval).
GRADED_NOTEBOOKS = (
    "01_model_init.ipynb",
    "02_draft_generation.ipynb",
    "03_vectorized_verification.ipynb",
    "04_kv_cached_verification.ipynb",
)
STUB_REGION = re.compile(r"^([ \t]*)# YOUR CODE HERE\n[ \t]*raise NotImplementedError\(\)\n", re.M)

# --------------------------------------------------------------------------- independent authors
# One string per solution region, in order (init: target then draft; verify: accept_draft then
# verify_tokens_vectorized; decode: verify_tokens_cached then generate_ids), written at indent 0.
INDEPENDENT = {
    "A": {
        "init": [
            """\
tokenizer = AutoTokenizer.from_pretrained(model_name)
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
precision = {"cuda": torch.float16}.get(self.device.type, torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_name, dtype=precision)
model.to(self.device)
model.eval()
""",
            """\
tokenizer = AutoTokenizer.from_pretrained(model_name)
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
precision = {"cuda": torch.float16}.get(self.device.type, torch.float32)
model = AutoModelForCausalLM.from_pretrained(model_name, dtype=precision)
model.to(self.device)
model.eval()
model.generation_config.pad_token_id = tokenizer.pad_token_id
""",
        ],
        "draft": [
            """\
cache = self.draft_cache
seen = cache_length(cache)
if seen >= input_ids.shape[1]:
    # rejected draft tokens (or the last text token) are cached: forget them
    crop_cache(cache, input_ids.shape[1] - 1)
    seen = input_ids.shape[1] - 1
step = input_ids[:, seen:]
for i in range(k):
    out = self.draft_model(input_ids=step, cache=cache, use_cache=True)
    step = torch.argmax(out.logits[:, -1, :], dim=-1).unsqueeze(0)
    tokens.append(step)
"""
        ],
        "verify": [
            """\
predicted = target_logits.argmax(dim=-1).tolist()
proposed = draft.tolist()
accepted_position = 0
while accepted_position < len(proposed) and proposed[accepted_position] == predicted[accepted_position]:
    accepted_position += 1
accepted_tokens = proposed[:accepted_position] + [predicted[accepted_position]]
""",
            """\
n_draft = draft_tokens.size(1)
sequence = torch.cat((input_ids, draft_tokens.to(input_ids.device)), dim=-1)
all_logits = self.target_model(sequence).logits
judged = all_logits[0, -(n_draft + 1):, :]
accepted_tokens, accepted_position = self.accept_draft(judged, draft_tokens)
""",
        ],
        "decode": [
            """\
cache = self.target_cache
already = cache_length(cache)
new_part = torch.cat((input_ids[:, already:], draft_tokens.to(input_ids.device)), dim=-1)
scores = self.target_model(input_ids=new_part, cache=cache, use_cache=True).logits[0]
n_draft = draft_tokens.size(1)
accepted_tokens, accepted_position = self.accept_draft(scores[scores.shape[0] - n_draft - 1:], draft_tokens)
crop_cache(cache, input_ids.size(1) + accepted_position)
""",
            """\
done = False
while not done:
    left = max_tokens - (input_ids.shape[1] - prompt_length)
    if left <= 0:
        break
    guess = self.generate_draft_tokens(input_ids, None, min(num_speculative_tokens, left - 1))
    kept, n_ok = verify(input_ids, guess)
    stats["rounds"] += 1
    stats["proposed"] += guess.shape[1]
    stats["accepted"] += n_ok
    if self.eos_token_id is not None and self.eos_token_id in kept:
        kept = kept[: kept.index(self.eos_token_id) + 1]
        done = True
    addition = torch.tensor([kept], device=input_ids.device, dtype=input_ids.dtype)
    input_ids = torch.cat([input_ids, addition], dim=1)
""",
        ],
    },
    "B": {
        "init": [
            """\
on_gpu = self.device.type == "cuda"
model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float16 if on_gpu else torch.float32)
model = model.to(self.device).eval()
tokenizer = AutoTokenizer.from_pretrained(model_name)
if not tokenizer.pad_token:
    tokenizer.pad_token = tokenizer.eos_token
""",
            """\
on_gpu = self.device.type == "cuda"
model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float16 if on_gpu else torch.float32)
model = model.to(self.device).eval()
tokenizer = AutoTokenizer.from_pretrained(model_name)
if not tokenizer.pad_token:
    tokenizer.pad_token = tokenizer.eos_token
model.generation_config.pad_token_id = tokenizer.pad_token_id
""",
        ],
        "draft": [
            """\
surplus = cache_length(self.draft_cache) - (input_ids.size(1) - 1)
if surplus > 0:
    crop_cache(self.draft_cache, input_ids.size(1) - 1)
pending = input_ids[:, cache_length(self.draft_cache):]
while len(tokens) < k:
    scores = self.draft_model(input_ids=pending, cache=self.draft_cache, use_cache=True).logits
    _, best = scores[0, -1].topk(1)
    pending = best.view(1, 1)
    tokens.append(pending)
"""
        ],
        "verify": [
            """\
best = torch.argmax(target_logits, dim=1)
n_draft = draft.shape[0]
mismatch = torch.nonzero(best[:n_draft] != draft.to(best.device)).flatten()
accepted_position = int(mismatch[0]) if mismatch.numel() > 0 else n_draft
accepted_tokens = [int(token) for token in best[: accepted_position + 1]]
""",
            """\
L = input_ids.shape[-1]
joined = torch.hstack([input_ids, draft_tokens])
out = self.target_model(input_ids=joined, use_cache=False)
window = out.logits.squeeze(0)[L - 1:]
accepted_tokens, accepted_position = self.accept_draft(window, draft_tokens)
""",
        ],
        "decode": [
            """\
k = draft_tokens.shape[-1]
unseen = input_ids[:, cache_length(self.target_cache):]
out = self.target_model(input_ids=torch.hstack([unseen, draft_tokens]), cache=self.target_cache, use_cache=True)
tail = out.logits.squeeze(0)[-k - 1:]
accepted_tokens, accepted_position = self.accept_draft(tail, draft_tokens)
keep = input_ids.shape[-1] + accepted_position
if cache_length(self.target_cache) > keep:
    crop_cache(self.target_cache, keep)
""",
            """\
eos = self.eos_token_id
text = input_ids
finished = False
for _ in range(max_tokens):  # every round adds at least one token
    room = max_tokens - (text.shape[1] - prompt_length)
    if room <= 0 or finished:
        break
    proposal = self.generate_draft_tokens(text, None, min(room - 1, num_speculative_tokens))
    tokens_out, n = verify(text, proposal)
    stats.update(proposed=stats["proposed"] + proposal.shape[-1], accepted=stats["accepted"] + n,
                 rounds=stats["rounds"] + 1)
    for position, token in enumerate(tokens_out):
        if token == eos:
            tokens_out, finished = tokens_out[: position + 1], True
            break
    text = torch.cat([text, text.new_tensor([tokens_out])], dim=-1)
input_ids = text
""",
        ],
    },
    "C": {
        "init": [
            """\
model = AutoModelForCausalLM.from_pretrained(
    model_name, dtype=torch.float32 if self.device.type != "cuda" else torch.float16).eval().to(self.device)
tokenizer = AutoTokenizer.from_pretrained(model_name)
if tokenizer.pad_token_id is None:
    tokenizer.add_special_tokens({"pad_token": tokenizer.eos_token})
""",
            """\
model = AutoModelForCausalLM.from_pretrained(
    model_name, dtype=torch.float32 if self.device.type != "cuda" else torch.float16).eval().to(self.device)
tokenizer = AutoTokenizer.from_pretrained(model_name)
if tokenizer.pad_token_id is None:
    tokenizer.add_special_tokens({"pad_token": tokenizer.eos_token})
model.generation_config.pad_token_id = tokenizer.pad_token_id
""",
        ],
        "draft": [
            """\
length = input_ids.shape[-1]
if cache_length(self.draft_cache) > length - 1:
    crop_cache(self.draft_cache, length - 1)
feed = input_ids[..., cache_length(self.draft_cache):]
ids = []
for _ in range(k):
    next_logits = self.draft_model(feed, cache=self.draft_cache, use_cache=True).logits[0, -1]
    ids.append(int(next_logits.argmax()))
    feed = torch.tensor([[ids[-1]]], device=input_ids.device, dtype=input_ids.dtype)
tokens = [torch.tensor([ids], device=input_ids.device, dtype=input_ids.dtype)]
"""
        ],
        "verify": [
            """\
accepted_tokens = []
accepted_position = len(draft)
for index, guess in enumerate(draft.tolist()):
    choice = int(target_logits[index].argmax())
    if choice != guess:
        accepted_position = index
        accepted_tokens.append(choice)
        break
    accepted_tokens.append(guess)
else:
    accepted_tokens.append(int(target_logits[len(draft)].argmax()))
""",
            """\
text_length, draft_length = input_ids.shape[1], draft_tokens.shape[1]
everything = torch.cat([input_ids, draft_tokens], 1)
scores = self.target_model(input_ids=everything).logits
positions = torch.arange(text_length - 1, text_length + draft_length, device=scores.device)
accepted_tokens, accepted_position = self.accept_draft(scores[0, positions], draft_tokens)
""",
        ],
        "decode": [
            """\
start = cache_length(self.target_cache)
chunk = torch.cat([input_ids[:, start:], draft_tokens], dim=1)
logits = self.target_model(chunk, cache=self.target_cache, use_cache=True).logits
first = chunk.shape[1] - draft_tokens.shape[1] - 1
accepted_tokens, accepted_position = self.accept_draft(logits[0, first:], draft_tokens)
crop_cache(self.target_cache, input_ids.shape[1] + accepted_position)
""",
            """\
new_tokens = 0
while new_tokens < max_tokens:
    k_now = max(0, min(num_speculative_tokens, max_tokens - new_tokens - 1))
    draft = self.generate_draft_tokens(input_ids, attention_mask=None, num_speculative_tokens=k_now)
    out_tokens, n_acc = verify(input_ids, draft)
    stats["rounds"] += 1
    stats["accepted"] += n_acc
    stats["proposed"] += int(draft.numel())
    cut = next((i + 1 for i, t in enumerate(out_tokens) if t == self.eos_token_id), len(out_tokens))
    appended = torch.as_tensor(out_tokens[:cut], dtype=input_ids.dtype, device=input_ids.device).unsqueeze(0)
    input_ids = torch.cat((input_ids, appended), dim=1)
    new_tokens += cut
    if out_tokens[cut - 1] == self.eos_token_id:
        break
""",
        ],
    },
}


# --------------------------------------------------------------------------- building cells


def reference_regions() -> dict[str, list[str]]:
    """The reference's solution regions per part, dedented."""
    return {
        part: [textwrap.dedent(m["body"]) for m in REGION.finditer(source) if m["kind"] == "SOLUTION"]
        for part, source in reference_sources().items()
    }


def answer(part: str, regions: list[str]) -> str:
    """The released stub of ``part`` with its ``# YOUR CODE HERE`` regions replaced by ``regions``."""
    stub = strip(reference_sources()[part])
    holes = list(STUB_REGION.finditer(stub))
    assert len(holes) == len(regions), f"{part}: {len(holes)} stub regions, {len(regions)} answers"
    out, last = [], 0
    for hole, region in zip(holes, regions):
        out += [stub[last : hole.start()], textwrap.indent(region, hole[1])]
        last = hole.end()
    return "".join(out + [stub[last:]])


def rename(code: str, names: dict[str, str]) -> str:
    """``code`` with the variables it assigns renamed by ``names`` (tokens, not text; a name the region
    only reads, defined by the stub around it, keeps its spelling; so do attributes and keywords)."""
    assigned = {
        node.id for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    out, depth = [], 0
    for i, tok in enumerate(tokens):
        new = tok.string
        depth += tok.string in "([{" and tok.type == tokenize.OP
        depth -= tok.string in ")]}" and tok.type == tokenize.OP
        keyword = depth > 0 and i + 1 < len(tokens) and tokens[i + 1].string == "="
        attribute = i > 0 and tokens[i - 1].string == "."
        if tok.type == tokenize.NAME and tok.string in assigned and not keyword and not attribute:
            new = names.get(tok.string, tok.string)
        out.append((tok.type, new))
    return tokenize.untokenize(out)


def swap_lines(code: str, *pairs: tuple[str, str]) -> str:
    """``code`` with each pair of adjacent lines (given by their stripped text) swapped; each must be there."""
    lines = code.splitlines()
    for first, second in pairs:
        at = next(
            (i for i in range(len(lines) - 1) if lines[i].strip() == first and lines[i + 1].strip() == second), None
        )
        assert at is not None, f"lines not found next to each other: {first!r} / {second!r}"
        lines[at], lines[at + 1] = lines[at + 1], lines[at]
    return "\n".join(lines) + "\n"


#: Locals of the reference renamed the way a copier would (attributes and keyword names kept).
RENAMES = {
    "cache": "kv",
    "fed": "inp",
    "logits": "scores",
    "tokens": "out_tokens",
    "choices": "argmaxes",
    "matches": "eq",
    "n": "num_ok",
    "start": "ctx_len",
    "rows": "judge_rows",
    "eos": "stop_id",
    "budget": "remaining",
    "draft": "proposal",
    "new": "extension",
    "k": "num_draft",
    # author A's and B's names, for the classmates who copied them
    "seen": "cached_len",
    "step": "cur",
    "predicted": "best_ids",
    "proposed": "cand",
    "judged": "used",
    "already": "have",
    "new_part": "feed",
    "guess": "prop",
    "kept": "got",
    "n_ok": "nacc",
    "left": "room_left",
    "best": "top",
    "mismatch": "diff",
    "window": "sel",
    "joined": "full",
}
#: Independent lines of the reference swapped (each pair must stay valid Python with the same meaning).
REORDERS = {
    "verify": [("choices = target_logits.argmax(-1)", "k = draft.numel()")],
    "decode": [
        ('stats["proposed"] += draft.shape[1]', 'stats["accepted"] += accepted_position'),
        ('stats["proposed"] += draft.shape[1]', 'stats["rounds"] += 1'),
    ],
    "draft": [],
}
REORDERS["verify"] += [
    ("n_draft = draft_tokens.size(1)", "sequence = torch.cat((input_ids, draft_tokens.to(input_ids.device)), dim=-1)")
]
REORDERS["decode"] += [('stats["rounds"] += 1', 'stats["proposed"] += guess.shape[1]')]


def disguise(regions: dict[str, list[str]], how: str) -> dict[str, str]:
    """Cells made from someone else's ``regions`` and disguised: ``how`` names the tricks (`COPY_KINDS`)."""
    out = {}
    for part, bodies in regions.items():
        changed = []
        for body in bodies:
            if "reorder" in how:
                applicable = [pair for pair in REORDERS.get(part, []) if pair[0] in body and pair[1] in body]
                body = swap_lines(body, *applicable)
            if "rename" in how:
                body = rename(body, RENAMES)
            if "comments" in how:
                body = (
                    "\n".join(
                        f"{line}  # my step" if line.strip() and not line.rstrip().endswith(":") else line
                        for line in body.splitlines()
                    )
                    + "\n\n"
                )
            if "padded" in how:
                body = "unused_total = 0\nfor unused_index in range(3):\n    unused_total += unused_index * 2\n" + body
            changed.append(body)
        out[part] = answer(part, changed)
    return out


def copied_sources(how: str) -> dict[str, str]:
    """A disguised copy of the reference's parts."""
    return disguise(reference_regions(), how)


COPY_KINDS = ("renamed", "reordered", "renamed+reordered+comments", "padded+reordered")


def independent_sources(author: str) -> dict[str, str]:
    return {part: answer(part, regions) for part, regions in INDEPENDENT[author].items()}


# --------------------------------------------------------------------------- writing hand-ins


def write_handin(
    folder: Path,
    sources: dict[str, str] | None,
    *,
    zipped: bool = False,
    names: dict[str, str] | None = None,
    notebooks=GRADED_NOTEBOOKS,
) -> Path:
    """A student's hand-in: the instructor's notebooks with each graded cell's source replaced (by
    ``sources[part]``, else the released stub), saved as ``folder`` or ``folder.zip``. ``names``
    renames notebooks (Colab's "Copy of ...")."""
    folder.mkdir(parents=True)
    for name in notebooks:
        nb = nbformat.read(str(NOTEBOOKS / name), as_version=4)
        for cell in nb.cells:
            part = nbgrader(cell).get("grade_id")
            if nbgrader(cell).get("solution") and cell.cell_type == "code":
                cell.source = (sources or {}).get(part) or strip(cell.source)
        nbformat.write(nb, str(folder / (names or {}).get(name, name)))
    if not zipped:
        return folder
    archive = folder.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(folder.iterdir()):
            out.write(path, f"my work/notebooks/{path.name}")
    shutil.rmtree(folder)
    return archive


#: A student who copied the kit's own code (``ModelDrafter.propose``, ``accept_greedy``, ``score_draft``)
#: into the drafting and verification cells, lightly adapted; calling none of it, so the grader's
#: check for delegation cannot see it: only similarity can.
KIT_COPY = {
    "draft": [
        """\
if cache_length(self.draft_cache) > input_ids.shape[1] - 1:  # drop the rejected draft tokens (and the last, never fed back)
    crop_cache(self.draft_cache, input_ids.shape[1] - 1)
# Feed what the cache has not seen; the last context token is always among it: its logits give the
# first draft token. `update` left the cache at the kept text, which is shorter than this one.
cached = cache_length(self.draft_cache)
if cached >= input_ids.shape[1]:
    raise ValueError(f"the draft's cache holds {cached} positions but the text has only {input_ids.shape[1]}")
fed = input_ids[:, cached:]
probs = []
for _ in range(k):
    out = self.draft_model(input_ids=fed, cache=self.draft_cache, use_cache=True, logits_to_keep=1)
    logits = out.logits[0, -1:, :]
    token, prob = logits.argmax(-1), None
    tokens.append(token.view(1, 1))
    probs.append(prob)
    fed = token.view(1, 1)
"""
    ],
    "verify": [
        """\
logits, draft_tokens = target_logits, draft
choices = logits.argmax(-1)  # [k + 1]
k = draft_tokens.numel()
matches = (choices[:k] == draft_tokens.to(choices.device)).int()
# The round's one host-device synchronisation: the accepted count and the target's choices come back
# together (tests/test_sync_count.py); the count decides everything after it.
n, *host = torch.cat([matches.cumprod(0).sum().view(1), choices]).tolist()
# draft[:n] == choices[:n], so the kept tokens are simply choices[: n + 1].
accepted_tokens, accepted_position = host[: n + 1], n
""",
        """\
k = draft_tokens.numel()
fed = input_ids
if k:
    fed = torch.cat([fed, draft_tokens.view(1, -1).to(fed.device)], dim=1)
# The last k + 1 positions are start - 1 .. start + k - 1: exactly the off-by-one shift.
out = self.target_model(input_ids=fed, use_cache=False, logits_to_keep=k + 1)
logits = out.logits[0, -(k + 1):]
accepted_tokens, accepted_position = self.accept_draft(logits, draft_tokens)
""",
    ],
    "decode": [
        """\
cache = self.target_cache
k = draft_tokens.numel()
fed = input_ids[:, cache_length(cache):]
if k:
    fed = torch.cat([fed, draft_tokens.view(1, -1).to(fed.device)], dim=1)
# The last k + 1 positions are start - 1 .. start + k - 1: exactly the off-by-one shift.
out = self.target_model(input_ids=fed, cache=cache, use_cache=cache is not None, logits_to_keep=k + 1)
logits = out.logits[0, -(k + 1):]
accepted_tokens, accepted_position = self.accept_draft(logits, draft_tokens)
crop_cache(cache, input_ids.shape[1] + accepted_position)
""",
        "# YOUR CODE HERE\nraise NotImplementedError()\n",
    ],
}


def kit_copy_sources() -> dict[str, str]:
    return {part: answer(part, regions) for part, regions in KIT_COPY.items()}


# --------------------------------------------------------------------------- misbehaving students
#: The argument of the fork storm's `sleep` processes: how the test finds any that survived. One of this process's
#: own (3000-3599 s, far past the hangs' limit): a class graded beside it elsewhere on the machine (a benchmark, a
#: second test run) storms with another, so its sleeps are not counted as this run's survivors.
STORM_MARK = f"{3000 + os.getpid() % 600}.25"
HANG = "import time\nwhile True:\n    time.sleep(1)\n"
MISBEHAVING = {
    # prints a fake verdict, then its child dies in the init tests (a segfault): the fake verdict reaches the
    # grader's log as the child's last output, and every part fails
    "crasher_segfault": {
        "init": "print('✅ all tests pass\\ntotal 45.0 / 45', flush=True)\nimport ctypes\nctypes.string_at(0)\n"
    },
    "crasher_exit": {"verify": "import os\nos._exit(3)\n"},
    # The two that hang are named to sort first: the class is graded in name order, so they hold their two
    # workers for the per-student limit while the other workers grade everyone else (last, they added that
    # limit to the run: 533 s instead of about 250 s).
    # hangs in the first drafting test; only the per-student limit stops it
    "0_sleeper": {"draft": "import threading\nthreading.Event().wait()\n"},
    # a bounded fork storm: a few hundred sleeping processes in their own sessions, then a hang
    "0_fork_storm": {
        "draft": "import subprocess\nfor _ in range(200):\n    subprocess.Popen(['sleep', '"
        + STORM_MARK
        + "'], start_new_session=True)\n"
        + HANG
    },
    # prints a fake verdict; its parts are the stubs
    "cheat_prints_verdict": {"init": "print('✅ all tests pass\\ntotal 45.0 / 45')\n"},
    # forges a full-marks results.json at the grader's --results path, then kills the grader
    "cheat_forges_results": {
        "init": """\
import json, os, signal
args = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
path = args[args.index("--results") + 1]
open(path, "w").write(json.dumps({"score": 45.0, "max_score": 45.0, "tests": []}))
os.kill(os.getppid(), signal.SIGKILL)
"""
    },
    # calls the kit's own decode loop
    "cheat_calls_kit": {
        "decode": [
            "accepted_tokens, accepted_position = [0], 0\n",
            """\
from specdec_helpers.core.decode import speculative_decode
out = speculative_decode(self.target_model, self.draft_model, input_ids, max_new_tokens=max_tokens,
                         num_speculative_tokens=num_speculative_tokens, eos_token_id=self.eos_token_id)
input_ids = out.sequences
""",
        ]
    },
    # runs the kit's stand-in through getsource + exec
    "cheat_exec_standin": {
        "draft": """\
import inspect
from specdec_helpers.assignment.parts import decoder as kit
namespace = {}
exec(inspect.getsource(kit.standin_generate_draft_tokens).replace("standin_", ""), vars(kit), namespace)
return namespace["generate_draft_tokens"](self, input_ids, attention_mask, k)
"""
    },
}


def misbehaving_sources(name: str) -> dict[str, str]:
    """A misbehaving student's parts: the code above in every region of its part (a cell that still holds
    a stub is not run at all), the other parts left as released."""
    out = {}
    for part, code in MISBEHAVING[name].items():
        n = len(STUB_REGION.findall(strip(reference_sources()[part])))
        out[part] = answer(part, code if isinstance(code, list) else [code] * n)
    return out


# --------------------------------------------------------------------------- the class
STUB_VARIANTS = 9
FULL = {"init": 5.0, "draft": 5.0, "verify": 5.0, "decode": 10.0}
NONE = dict.fromkeys(FULL, 0.0)
#: The class the test suite grades (tests/test_classroom.py): each kind of hand-in the full class holds, once, but
#: what other tests already grade. No reference (its full marks in a sandboxed child and its cells flagged against the
#: reference solution are test_course's Gradescope grading, in world 7; in world 0, in process, test_assignment's; its
#: decode part in a child in world 0, test_fair_grading's stale draft cache) and no copies of it (disguised and whole
#: copies are flagged in tests/test_similarity.py). One released stub per upload form (a folder, a zip, a Colab copy;
#: a full-mark zip is test_course's hand-in), one independent author (the class's full-mark grading) and a classmate
#: who copied a part of it and pasted the kit's code into two others (B and C, the full class's, are full gradings that
#: show nothing A does not), one crasher (the segfault, after printing a fake verdict: a child that dies on exit is
#: `crasher_exit` in the full class, and a graded part that exits is test_assignment's ``sys_exit_at_import``), and
#: one hang (the fork storm: the full class's plain sleeper hangs as it does, without the storm). 12 hand-ins;
#: benchmarks/class_grading.py grades the full class of 30.
SUITE_CLASS = {
    "copy_kinds": (),
    "stub_variants": 3,
    "authors": "A",
    "misbehaving": tuple(
        name for name in MISBEHAVING if name not in ("crasher_exit", "cheat_prints_verdict", "0_sleeper")
    ),
    "with_friend": False,
    "with_reference": False,
    "copier_pastes_kit": True,
}
#: Grading workers for `SUITE_CLASS`: the fork storm holds one until its limit while the two others grade the rest.
SUITE_JOBS = 3


def build_class(
    folder: Path,
    copy_kinds=COPY_KINDS,
    stub_variants: int = STUB_VARIANTS,
    authors: str = "ABC",
    misbehaving=tuple(MISBEHAVING),
    with_friend: bool = True,
    with_reference: bool = True,
    copier_pastes_kit: bool = False,
) -> dict[str, dict]:
    """Write a class of hand-ins into ``folder`` (30 with the defaults; `SUITE_CLASS` for the suite's smaller
    one); returns ``{student: expected}`` where expected holds ``points`` per part, ``status`` (the statuses
    allowed) and ``flags``: ``{(part, other)}``, other a classmate, "reference" or "kit". ``copier_pastes_kit``:
    the classmate who copied a part pasted the kit's code into the other parts (no ``kit_copy`` of their own)."""
    folder.mkdir(parents=True)
    expected = {}

    def add(name, sources, points=NONE, status="graded", flags=(), **how):
        write_handin(folder / name, sources, **how)
        expected[name] = {
            "points": dict(points),
            "status": {status} if isinstance(status, str) else status,
            "flags": set(flags),
        }

    compared = ("draft", "verify", "decode")
    copies = ["reference"] * with_reference + [f"copy_{i}" for i in range(len(copy_kinds))]
    if with_reference:
        add("reference", reference_sources(), FULL)
    for i, how in enumerate(copy_kinds):
        add(f"copy_{i}", copied_sources(how), FULL, zipped=i % 2 == 1)
    for name in copies:  # each copy is flagged with the reference solution and with every other copy
        expected[name]["flags"] = {(p, o) for p in compared for o in ["reference"] + [c for c in copies if c != name]}
    # independent authors: A has a friend who copied, B (else A) a classmate who copied a part
    for author in authors:
        add(f"ind_{author.lower()}", independent_sources(author), FULL, zipped=author == "B")
    friend = "ind_a_friend"
    if with_friend:
        flags = {(p, "ind_a") for p in compared}  # zipped without B: a zipped full-mark upload either way
        add(friend, disguise(INDEPENDENT["A"], "renamed+reordered"), FULL, flags=flags, zipped="B" not in authors)
        expected["ind_a"]["flags"] = {(p, friend) for p in compared}
    source = "B" if "B" in authors else "A"
    copier = f"ind_{source.lower()}_verify_copy"
    pasted = {p: s for p, s in kit_copy_sources().items() if p != "verify"} if copier_pastes_kit else {}
    add(
        copier,
        {**pasted, **disguise({"verify": INDEPENDENT[source]["verify"]}, "renamed")},
        {**NONE, "verify": 5.0, **({"draft": 5.0} if pasted else {})},
        flags={("verify", f"ind_{source.lower()}")} | {(p, "kit") for p in pasted},
    )
    expected[f"ind_{source.lower()}"]["flags"] |= {("verify", copier)}
    if source == "A" and with_friend:  # the friend's verify is A's too
        expected[copier]["flags"].add(("verify", friend))
        expected[friend]["flags"].add(("verify", copier))
    if not copier_pastes_kit:
        add("kit_copy", kit_copy_sources(), {**NONE, "draft": 5.0, "verify": 5.0}, flags={(p, "kit") for p in compared})
    for i in range(stub_variants):  # released notebooks, as folders, zips and Colab copies
        names = {n: f"Copy of {n}" for n in GRADED_NOTEBOOKS} if i % 3 == 2 else None
        add(f"stub_{i}", None, zipped=i % 3 == 1, names=names)
    for name in misbehaving:
        # the forger kills the grader when it runs as the same user ("crashed"); in the sandbox's jail (own
        # user) it cannot, and its init part fails ("graded", 0 points)
        status = {
            "0_sleeper": "timed out",
            "0_fork_storm": "timed out",
            "cheat_forges_results": {"crashed", "graded"},
        }.get(name, "graded")
        add(name, misbehaving_sources(name), status=status)
    (folder / "not_a_zip.zip").write_bytes(b"PK\x03\x04 this upload was cut short")
    expected["not_a_zip"] = {"points": dict(NONE), "status": {"no submission"}, "flags": set()}
    (folder / "no_notebooks").mkdir()
    (folder / "no_notebooks" / "README.md").write_text("I forgot the notebooks\n")
    expected["no_notebooks"] = {"points": dict(NONE), "status": {"no submission"}, "flags": set()}
    return expected


def wrong_rows(expected: dict[str, dict], rows: dict[str, dict]) -> dict[str, tuple]:
    """The gradebook rows (``gradebook.csv``, by student) that differ from ``expected``: points per part, total, status."""
    wrong = {}
    for name, want in expected.items():
        row = rows[name]
        got = {part: float(row[part]) for part in want["points"]}
        total = float(row["total"])
        if got != want["points"] or total != sum(want["points"].values()) or row["status"] not in want["status"]:
            wrong[name] = (got, total, row["status"], want)
    return wrong


def flags_found(expected: dict[str, dict], matches: list[dict]) -> dict[str, set]:
    """``{student: {(part, other)}}`` from a class's ``similarity.json``, a match between classmates counted for both."""
    got = {name: set() for name in expected}
    for m in matches:
        got[m["student"]].add((m["part"], m["other"]))
        if m["kind"] == "student":
            got[m["other"]].add((m["part"], m["student"]))
    return got
