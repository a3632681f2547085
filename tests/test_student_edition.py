"""The student edition (``release``) holds no implementation of a graded part, under any name.

Released once per module into a temporary folder; then its text is searched for the kit's own graded
code (the instructor edition's INSTRUCTOR ONLY regions and the reference solutions' lines), and its
package is run in a subprocess: greedy speculative decoding refuses with a message that points to the
student's own decoder, sampling still works, and every stand-in names the notebook to finish first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specdec_helpers.assignment.authoring import release

URL = "https://github.com/example-course/specdec-students"

#: Lines that only an implementation of a graded part holds (the kit's own, in core/ and the stand-ins).
GRADED_LINES = [
    "matches = (choices[:k] == draft_tokens.to(choices.device)).int()",
    "n, *host = torch.cat([matches.cumprod(0).sum().view(1), choices]).tolist()",
    "rollback(drafter.cache, n_kept)",
    "rollback(self.target_cache, input_ids.shape[1] + result.num_accepted)",
    "rollback(target_cache, n_kept)",
    "return decode(target, no_draft, input_ids, **options)",
    "standin_verify_tokens_cached",
    "standin_generate_draft_tokens",
    'stats["accepted"] + accepted,',
    "_verify.score_draft(self.target_model, input_ids, draft_tokens), draft_tokens.reshape(-1)",
    "inspect.getsource(ModelDrafter",
]


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit") / "students"
    release.release(out, release.ROOT, URL)
    return out


def shipped_text(kit) -> dict[str, str]:
    texts = {}
    for path in kit.rglob("*"):
        text = release._text(path) if path.is_file() else None
        if text:
            texts[path.relative_to(kit).as_posix()] = text
    return texts


def test_no_graded_implementation_survives_in_the_text(kit):
    texts = shipped_text(kit)
    leaks = [(rel, line) for rel, text in texts.items() for line in GRADED_LINES if line in text]
    assert not leaks, leaks
    # ...and the instructor edition does hold them (the search looks for something real).
    instructor = "\n".join(p.read_text() for p in (release.ROOT / "specdec_helpers").rglob("*.py"))
    assert [line for line in GRADED_LINES if line in instructor and "getsource" not in line] == GRADED_LINES[:-1]


def test_the_release_scan_finds_no_scoring_pass(kit, tmp_path):
    """Issue 34: the kit holds no implementation of notebook 03's off-by-one scoring pass (the target's logits cut to
    the k + 1 rows that judge a draft), under any name or alias. The scan finds the instructor's own (`score_draft`)
    and one planted under another name, so it looks for something real."""
    found = [
        place
        for path in sorted((kit / "specdec_helpers").rglob("*.py"))
        for place in release.scoring_passes(path.read_text(), path.relative_to(kit).as_posix())
    ]
    assert not found, found
    instructor = release.scoring_passes((release.ROOT / "specdec_helpers/core/reference_parts.py").read_text(), "x.py")
    assert instructor and "-(k + 1)" in instructor[0]
    planted = tmp_path / "kit" / "specdec_helpers" / "measure" / "helpers.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(
        "def rows_for(model, ids, draft):\n"
        "    n = ids.shape[1]\n"
        "    return model(ids).logits[0][n - 1 : n + draft.numel()]\n"
    )
    with pytest.raises(
        release.ReleaseError, match="a scoring pass is in the kit: specdec_helpers/measure/helpers.py:3"
    ):
        release.verify(tmp_path / "kit", {})


def test_core_holds_no_marker_and_each_swapped_module_has_its_student_edition():
    """``core/`` holds no edition marker: its instructor-only parts are whole modules (`editions.SWAPS`), each with a
    student edition that defines the same public names, and is never imported where it lies."""
    import ast

    from specdec_helpers.assignment.grading import editions

    package = release.ROOT / "specdec_helpers"
    marked = [p.name for p in (package / "core").rglob("*.py") if release.MARKER.search(p.read_text())]
    assert not marked, f"edition markers in core/: {marked}"

    def public(path):
        tree = ast.parse(path.read_text())
        names = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        declared = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"]
        ]
        return {n for n in names if not n.startswith("_")}, set(ast.literal_eval(declared[0])) if declared else None

    assert editions.SWAPS
    for instructor, student in editions.SWAPS.items():
        assert instructor.startswith("core/") and (package / student).is_file(), (instructor, student)
        (mine, mine_all), (theirs, theirs_all) = public(package / instructor), public(package / student)
        assert mine == theirs == mine_all == theirs_all, (instructor, mine ^ theirs)
        module = "specdec_helpers." + student.removesuffix(".py").replace("/", ".")
        importers = [
            p.name
            for p in package.rglob("*.py")
            if module in p.read_text() or f"import {Path(student).stem}" in p.read_text()
        ]
        assert not importers, f"{module} is imported where it lies: {importers}"


def test_the_swapped_modules_ship_as_their_student_editions(kit):
    from specdec_helpers.assignment.grading import editions

    for instructor, student in editions.SWAPS.items():
        shipped = (kit / "specdec_helpers" / instructor).read_text()
        assert shipped == (release.ROOT / "specdec_helpers" / student).read_text()
        assert not (kit / "specdec_helpers" / student).exists()


def test_every_instructor_only_region_is_gone(kit):
    """Each INSTRUCTOR ONLY region's (and each swapped module's) distinctive lines are absent from the released
    file."""
    from specdec_helpers.assignment.grading import editions

    checked = 0
    for instructor in editions.SWAPS:
        source = (release.ROOT / "specdec_helpers" / instructor).read_text()
        shipped = (kit / "specdec_helpers" / instructor).read_text()
        lines = release._distinctive(source, shipped)
        checked += len(lines)
        assert lines and not [line for line in lines if line in shipped], instructor
    for path in (release.ROOT / "specdec_helpers").rglob("*.py"):
        source = path.read_text()
        rel = path.relative_to(release.ROOT).as_posix()
        if "### BEGIN INSTRUCTOR ONLY" not in source or not (kit / rel).exists():
            continue  # no region, or an instructor-only file (release.py itself)
        shipped = (kit / rel).read_text()
        visible = release.REGION.sub("", source)
        for body in release.regions(source):
            lines = release._distinctive(body, visible)
            checked += len(lines)
            assert not [line for line in lines if line in shipped], rel
    assert checked > 10


def run_in_kit(kit, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(kit), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=kit, env=env, capture_output=True, text=True, timeout=300
    )


#: Run in the released kit (``KIT``: its folder): greedy decoding and its building blocks refuse, each naming the
#: notebook to finish; sampling works on the student's scoring pass, greedy decoding is Hugging Face's generate.
REFUSES_GREEDY = """\
import torch, specdec_helpers as sd
assert sd.__file__.startswith(KIT), sd.__file__
from transformers import GPT2Config, GPT2LMHeadModel
from specdec_helpers.core.checks import StudentEditionError
from specdec_helpers.core.drafters import ModelDrafter
from specdec_helpers.core.verify import accept_greedy
from specdec_helpers.assignment.parts.decoder import STANDINS, PartMissing, build_decoder
torch.manual_seed(0)
model = lambda layers: GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=layers, n_head=4, vocab_size=64,
                                                  initializer_range=0.5)).eval()
target, draft = model(2), model(1)
ids = torch.tensor([[1, 2, 3, 4]])
refused = []
for kw in (dict(), dict(temperature=0.0), dict(temperature=1e-30), dict(temperature=1.0, top_k=1)):
    try:
        sd.speculative_decode(target, draft, ids, max_new_tokens=8, **kw)
    except ValueError as error:
        assert isinstance(error, StudentEditionError) and "your own SpeculativeDecoder" in str(error), error
        refused.append(kw)
assert len(refused) == 4, refused
for call in (lambda: accept_greedy(torch.zeros(3, 64), torch.tensor([1, 2])),
             lambda: sd.verify_tokens_vectorized(target, ids, torch.tensor([1, 2])),
             lambda: ModelDrafter(draft).propose(ids, 3)):
    try:
        call()
        raise SystemExit("a greedy building block ran in the student edition")
    except StudentEditionError as error:
        assert "notebook 0" in str(error)
# No scoring pass of the kit's own (notebook 03's heart), under any name: sampling needs the student's.
import specdec_helpers.core.decode as decode_module, specdec_helpers.core.verify as verify_module
assert not hasattr(sd, "score_draft") and not hasattr(decode_module, "score_draft")
for call in (lambda: verify_module.score_draft(target, ids, torch.tensor([1, 2])),
             lambda: sd.speculative_decode(target, draft, ids, max_new_tokens=8, temperature=1.0)):
    try:
        call()
        raise SystemExit("the kit scored a draft in the student edition")
    except StudentEditionError as error:
        assert "notebook 03" in str(error) and "score=nb.your_scoring(decoder)" in str(error), error
def my_scoring(target, input_ids, draft_tokens):  # what a student writes in notebook 03
    start, k = input_ids.shape[1], draft_tokens.numel()
    logits = target(torch.cat([input_ids, draft_tokens.view(1, -1)], dim=1)).logits[0]
    return logits[start - 1 : start + k]
# Sampling works on the student's scoring pass; greedy decoding is Hugging Face's generate.
out = sd.speculative_decode(target, draft, ids, max_new_tokens=8, temperature=1.0,
                            generator=torch.Generator().manual_seed(0), score=my_scoring)
assert out.sequences.shape == (1, 12) and out.stats.target_calls >= 2
hf = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=8,
                     pad_token_id=0)
assert torch.equal(sd.greedy_decode(target, ids, max_new_tokens=8).sequences, hf)
# No stand-in: each graded method names the notebook to finish.
decoder = build_decoder()
self = decoder.__new__(decoder)
for name, notebook in (("generate_draft_tokens", "02"), ("accept_draft", "03"),
                       ("verify_tokens_cached", "04"), ("initialize_target_model", "01")):
    try:
        STANDINS[name](self, ids, ids)
        raise SystemExit(f"stand-in {name} ran")
    except PartMissing as error:
        assert f"finish notebook {notebook}'s `{name}` first" in str(error), error
print("student edition ok")
"""
#: Run in the released kit: its tree-vs-chain table and batch sweep leave out the rows that need greedy decoding.
MEASURES_LEAVE_OUT = """\
import torch, specdec_helpers as sd
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
model = lambda layers: GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=layers, n_head=4, vocab_size=64,
                                                  initializer_range=0.5)).eval()
target, draft = model(2), model(1)
ids = torch.tensor([[1, 2, 3, 4]])
rows = sd.compare_tree_chain(target, draft, [ids], tree=(2, 1), max_new_tokens=6, show=False)
assert [r["method"] for r in rows] == ["greedy", "tree [2, 1]"] and all(r["same"] for r in rows), rows
sweep = sd.batch_sweep(target, draft, [ids[0]], batch_sizes=(1, 2), num_speculative_tokens=2,
                       max_new_tokens=4, repeats=1, show=False)
assert [r["batch"] for r in sweep] == [2] and sweep[0]["same"], sweep
"""


@pytest.fixture(scope="module")
def released_python(kit) -> dict[str, str]:
    """The two scripts above in one Python on the released kit (torch and the kit imported once, not once a
    script), one after the other, each in globals of its own. Per script: what it printed, ending in "=== NAME ok"
    when it ran to its end, else in the traceback that stopped it (the other script still runs)."""
    scripts = {"REFUSES_GREEDY": REFUSES_GREEDY, "MEASURES_LEAVE_OUT": MEASURES_LEAVE_OUT}
    runner = (
        "import json, traceback\n"
        f"for name, code in json.loads({json.dumps(scripts)!r}).items():\n"
        "    print('=== ' + name, flush=True)\n"
        "    try:\n"
        f"        exec(compile(code, name, 'exec'), {{'__name__': '__main__', 'KIT': {str(kit)!r}}})\n"
        "        print('=== ' + name + ' ok', flush=True)\n"
        "    except BaseException:\n"
        "        print(traceback.format_exc(), flush=True)\n"
    )
    done = run_in_kit(kit, runner)
    assert done.returncode == 0, done.stderr[-3000:]
    out, current = {name: "" for name in scripts}, None
    for line in done.stdout.splitlines():
        current = line[4:] if line.startswith("=== ") and line[4:] in scripts else current
        if current is not None:
            out[current] += line + "\n"
    return out


@pytest.mark.slow  # a Python subprocess on the released kit (`released_python`, shared with the next such test)
def test_the_released_package_refuses_greedy_and_names_the_notebook(released_python):
    out = released_python["REFUSES_GREEDY"]
    assert "=== REFUSES_GREEDY ok" in out and "student edition ok" in out, out[-3000:]


def test_the_instructor_edition_keeps_everything():
    import torch

    import specdec_helpers as sd
    from specdec_helpers.assignment.parts.decoder import STANDINS
    from tiny_models import tiny_model

    target, draft = tiny_model("gpt2", 0), tiny_model("gpt2", 1, layers=1)
    ids = torch.tensor([[1, 2, 3, 4]])
    out = sd.speculative_decode(target, draft, ids, max_new_tokens=8)
    assert torch.equal(out.sequences, sd.greedy_decode(target, ids, max_new_tokens=8).sequences)
    assert not any(getattr(fn, "missing_part", False) for fn in STANDINS.values())


def test_an_instructor_only_region_needs_a_student_part():
    source = "def f():\n    ### BEGIN INSTRUCTOR ONLY\n    return 1\n    ### END INSTRUCTOR ONLY\n"
    with pytest.raises(release.ReleaseError, match="without '### STUDENT EDITION'"):
        release.strip(source, where="f.py")
    source = (
        "def f():\n    ### BEGIN INSTRUCTOR ONLY\n    return 1\n    ### STUDENT EDITION\n"
        "    # raise ValueError('no')\n    ### END INSTRUCTOR ONLY\n"
    )
    assert release.strip(source) == "def f():\n    raise ValueError('no')\n"


STUBS = ["01_model_init", "02_draft_generation", "03_vectorized_verification", "04_kv_cached_verification"]
SOLVED = [
    "02_draft_generation",
    "03_vectorized_verification",
    "04_kv_cached_verification",
    "06_speculative_sampling",
    "07_tree_speculation",
    "08_serving_batches_and_trees",
]


@pytest.fixture(scope="module")
def released_runs(kit, tmp_path_factory) -> dict[str, list]:
    """The released notebooks of the two tests below, run in one kernel (`one_kernel`: each after an emptied
    namespace, in its own folder): the stubs as released (``stub NAME``) in the kit's notebooks/, then the
    released notebooks with this notebook's answers filled in (``solved NAME``) beside the instructor's 01-04.
    Errors are allowed; each test reads its notebook's cells."""
    import shutil

    from one_kernel import read, run_in_one_kernel

    folder = tmp_path_factory.mktemp("solved") / "notebooks"  # the kit fixture's notebooks stay the released stubs
    folder.mkdir()
    for path in (release.ROOT / "notebooks").glob("0[1-4]_*.ipynb"):
        shutil.copy(path, folder / path.name)
    parts = [(f"stub {name}", read(kit / "notebooks" / f"{name}.ipynb"), kit / "notebooks") for name in STUBS]
    for name in SOLVED:
        solved = {c.id: c.source for c in read(release.ROOT / "notebooks" / f"{name}.ipynb").cells}
        nb = read(kit / "notebooks" / f"{name}.ipynb")
        for cell in nb.cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                cell.source = solved[cell.id]
        parts.append((f"solved {name}", nb, folder))
    # SPECDEC_QUICK: 06's measurements at their small sizes, as under CI's nbval (their numbers are not checked here)
    env = {"PYTHONPATH": str(kit), "SPECDEC_PRESET": "toy", "OMP_NUM_THREADS": "1", "SPECDEC_QUICK": "1"}
    return run_in_one_kernel(parts, env)


def cell_text(cell) -> str:
    return "\n".join(
        str(o.get("text", "")) + str(o.get("evalue", "")) + "\n".join(o.get("traceback", [])) for o in cell.outputs
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", STUBS)
def test_no_check_passes_a_released_stub(released_runs, name):
    """The released notebooks run top to bottom (errors allowed) with every exercise still a stub, in the
    student kit: no check cell prints ✅, and a cell that needs an earlier part names its notebook."""
    texts = {cell.id: cell_text(cell) for cell in released_runs[f"stub {name}"]}
    assert texts and all(c.get("execution_count") for c in released_runs[f"stub {name}"]), f"{name}: a cell did not run"
    passed = [cid for cid, text in texts.items() if "✅" in text]
    assert not passed, f"{name}: checks passed on stubs: {passed}"
    if name != "01_model_init":
        assert "finish notebook" in "\n".join(texts.values()) or "Not done yet" in "\n".join(texts.values())


TRACK = ["01_model_init", "02_draft_generation", "03_vectorized_verification", "04_kv_cached_verification"]


@pytest.mark.parametrize("name", TRACK)
def test_notebooks_import_through_sd_and_nb_and_label_every_exercise(name):
    """Issue 28: one exercise track, each exercise says practice or graded; the kit only through sd./nb.
    (graded cells import what they need themselves: the grader runs them alone)."""
    import re

    import nbformat

    nb = nbformat.read(str(release.ROOT / "notebooks" / f"{name}.ipynb"), as_version=4)
    allowed = {
        "import specdec_helpers",
        "import specdec_helpers as sd",
        "from specdec_helpers.assignment.student import notebook as nb",
    }
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert "**Exercise" not in cell.source, f"{name} {cell.id}: say 'Practice exercise' or 'Graded exercise'"
        elif not cell.metadata.get("nbgrader", {}).get("solution"):
            imports = {
                line.strip() for line in cell.source.splitlines() if re.match(r"\s*(from|import) specdec_helpers", line)
            }
            assert imports <= allowed, f"{name} {cell.id}: {sorted(imports - allowed)}"
            assert not re.search(
                r"ModelDrafter|accept_greedy|score_draft|speculative_decode\(|getsource", cell.source
            ), f"{name} {cell.id} runs the kit's own graded code"
    labels = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Graded exercise" in labels


def test_the_kit_has_the_students_readmes(kit):
    notebooks_readme = (kit / "notebooks" / "README.md").read_text()
    assert "Practice exercise" in notebooks_readme and "nbgrader" not in notebooks_readme
    assert "Two editions" not in notebooks_readme  # the instructor's text stays home
    readme = (kit / "README.md").read_text()
    assert "YOUR ANSWER HERE" not in readme and "stand-in" not in readme
    assert "finish notebook 02's" in readme


@pytest.mark.slow  # a Python subprocess on the released kit (`released_python`, shared with the one above)
def test_the_released_measures_leave_out_what_the_kit_refuses(released_python):
    """Without the student's decoder, the student kit's tree-vs-chain table and batch sweep leave out the rows
    that need greedy speculative decoding of one prompt, and say so (notebooks 07 and 08 pass a decoder)."""
    out = released_python["MEASURES_LEAVE_OUT"]
    assert "=== MEASURES_LEAVE_OUT ok" in out, out[-3000:]
    assert "chain k=2 left out" in out and "chain k=3 left out" in out, out
    assert "batch size 1 left out" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("name", SOLVED)
def test_released_notebooks_run_on_the_students_decoder(released_runs, name):
    """A student who finished notebooks 01-04 (here: the instructor's copies) and this notebook's exercises
    runs the released notebook top to bottom without an error: its checks pass in the student kit (which
    refuses greedy drafting and decoding: a check that used them would fail a correct student), and 07/08's
    chains run on their own decoder."""
    cells = released_runs[f"solved {name}"]
    assert cells and all(c.get("execution_count") for c in cells), f"{name}: a cell did not run"
    errors = [o for c in cells for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, f"{name}: " + "\n".join(errors[0].get("traceback", []))[-3000:]  # the first error
    text = "\n".join(str(o.get("text", "")) for c in cells for o in c.outputs)
    assert (
        "❌" not in text
        and "StudentEditionError" not in text
        and "left out: the student edition of the kit has no scoring pass" not in text
    ), text[-3000:]
    if name < "07":
        return
    assert "decode  (04): yours" in text and "chain k=5 " in text and "chain k=9 " in text, text[-3000:]
    if name.startswith("08"):
        assert "batch size 1 left out" in text and "✅ Correct: greedy, both chains and the tree" in text


def test_a_missing_student_module_stops_the_swap_instead_of_shipping_the_instructors(tmp_path):
    """The swap fails closed: in the instructor's tree (it has assignment/authoring) a missing student module would
    leave the instructor's module in the student's view and kit, so it is an error; the student kit (swapped
    already, no authoring) has none to swap."""
    from specdec_helpers.assignment.grading import editions

    package = tmp_path / "specdec_helpers"
    for rel in editions.SWAPS:
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text("ANSWER = 1\n")
    (package / "assignment" / "authoring").mkdir(parents=True)
    with pytest.raises(editions.ReleaseError, match="student edition of core/.* is missing"):
        editions.swap_modules(package)
    with pytest.raises(editions.ReleaseError, match="is missing"):
        editions.edition_source(package, next(iter(editions.SWAPS)))
    (package / "assignment" / "authoring").rmdir()  # the student kit: nothing to swap, nothing raised
    editions.swap_modules(package)
    assert all((package / rel).read_text() == "ANSWER = 1\n" for rel in editions.SWAPS)
