"""Command line: ``python -m specdec_helpers <command> [options]``.

Every command's arguments live here, and nothing else: each command parses its arguments and calls
the library. This is the only module that imports every layer (core, models, measure, present,
assignment); library modules never import it.
"""
from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
import zipfile
from pathlib import Path

import torch

from specdec_helpers.assignment import check as check_module
from specdec_helpers.assignment import grader as grader_module
from specdec_helpers.assignment import handin as handin_module
from specdec_helpers.assignment import release as release_module
from specdec_helpers.assignment.check import run_check
from specdec_helpers.assignment.grader import (
    EXTRA_CREDIT,
    LABELS,
    Report,
    Result,
    _pairs,
    load_config,
    measure,
)
from specdec_helpers.assignment.grader import grade as grade_submission
from specdec_helpers.assignment.handin import handin as write_handin
from specdec_helpers.assignment.mutations import grade_all
from specdec_helpers.assignment.release import ROOT, ReleaseError
from specdec_helpers.assignment.release import release as write_release
from specdec_helpers.assignment.submission import SubmissionError, load
from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.measure.bench import (
    DEFAULT_KS,
    METHODS,
    draft_label,
    load_cases,
    run_sweep,
)
from specdec_helpers.measure.perf import (
    DEFAULT_DRAFTS,
    PERF_METHODS,
    compiled_costs,
    profile_decode,
    ratio_rows,
    with_inner_models,
)
from specdec_helpers.measure.results import (
    COMPILED_METHODS,
    SPECULATIVE,
    environment,
    save_results,
)
from specdec_helpers.models.drafts import eagle
from specdec_helpers.models.drafts.distill import distill_draft, distilled_dir, is_saved
from specdec_helpers.models.drafts.registry import DRAFTS, draft_names_help
from specdec_helpers.models.pairs import (
    OFFLINE_PRESETS,
    PRESETS,
    _model_name,
    get_preset,
    load_pair,
)
from specdec_helpers.present import demo as demo_module
from specdec_helpers.present.demo import (
    default_prompt,
    legend,
    render,
    summary_table,
    use_color,
)
from specdec_helpers.present.notebook import quiet
from specdec_helpers.present.plots import save_all_figures
from specdec_helpers.present.report import TEMPLATE, build_report
from specdec_helpers.present.tables import (
    print_profile,
    print_ratios,
    sweep_table,
    to_markdown,
    write_tables,
)
from specdec_helpers.present.widgets import token_spans


def _demo_args(argv):
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers demo", description=demo_module.__doc__.splitlines()[0])
    parser.add_argument("--preset", default=OFFLINE_PRESETS[0],
                        help=f"pair to load (default: {OFFLINE_PRESETS[0]}; offline: {', '.join(OFFLINE_PRESETS)}; "
                             f"also auto, {', '.join(p for p in PRESETS if p not in OFFLINE_PRESETS)})")
    parser.add_argument("--prompt", help="text to continue (default: a prompt that suits the preset)")
    parser.add_argument("-k", "--num-speculative-tokens", type=int, dest="k",
                        help="draft tokens per round (default: the preset's)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--draft", help=f"override the preset's draft: {draft_names_help()}; or a hub id / folder")
    parser.add_argument("--show-rejected", action="store_true", help="also show rejected draft tokens, struck out")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="ANSI colours (auto: when stdout is a terminal and NO_COLOR is unset)")
    return parser.parse_args(argv)


def demo(argv=None) -> int:
    args = _demo_args(argv)
    import torch


    try:
        pair = load_pair(args.preset, draft=args.draft, progress=True)
    except (OSError, ImportError, ValueError) as error:  # friendly load errors: no traceback
        print(f"demo: {error}", file=sys.stderr)
        return 1
    k = args.k or pair.num_speculative_tokens
    prompt = args.prompt or default_prompt(pair.preset)
    input_ids = pair.encode(prompt)
    n = args.max_new_tokens

    print(f"decoding {n} tokens, greedy then speculative ...", file=sys.stderr, flush=True)
    # Warm-up: the first calls pay one-off costs (allocations, kernel selection) that are no part of either method.
    greedy_decode(pair.target, input_ids, max_new_tokens=4)
    speculative_decode(pair.target, pair.draft, input_ids, max_new_tokens=4, num_speculative_tokens=k)
    greedy = greedy_decode(pair.target, input_ids, max_new_tokens=n)
    spec = speculative_decode(pair.target, pair.draft, input_ids, max_new_tokens=n, num_speculative_tokens=k)
    identical = torch.equal(spec.sequences, greedy.sequences)

    color = use_color(args.color)
    print(f"preset={pair.preset}  draft={draft_label(pair.draft)}  k={k}  device={pair.device}  "
          f"dtype={str(pair.dtype).removeprefix('torch.')}")
    print(f"prompt: {prompt!r}\n")
    print(render(token_spans(spec, pair.tokenizer, input_ids.shape[1], show_prompt=False), color, args.show_rejected))
    print("\n" + legend(color, args.show_rejected) + "\n")
    print(summary_table(spec, greedy, identical))
    return 0


def print_summary(results: dict, file=None) -> None:
    """One PA3-style block per (preset, drafter, k), then the sweep table."""
    out = file or sys.stdout
    for row in results["summary"]:
        if row["method"] == SPECULATIVE and row.get("speedup"):
            print(f"{row['preset']}/{row['drafter']} k={row['k']}: Speedup: {row['speedup']:.2f}x  "
                  f"Latency reduction: {row['latency_reduction']:.2f}%  "
                  f"Draft token acceptance rate: {row['acceptance_rate']:.2%}", file=out)
    print("\n" + to_markdown(*sweep_table(results)), file=out)


def bench(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers bench",
                                     description="Benchmark speculative decoding against greedy baselines (sweep over k).")
    parser.add_argument("--preset", default="toy", help="preset name(s), comma-separated (default: toy)")
    parser.add_argument("--draft", default=None,
                        help=f"draft(s), comma-separated (default: the preset's): default, a hub id, or {draft_names_help()}")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="draft lengths k (default: 1,2,4,8,16)")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per method first")
    parser.add_argument("--prompts", nargs="+", default=None,
                        help="prompt strings, or @file with one prompt a line (default: the 3 PA3 prompts + 2 more: five)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default="report", help="folder for results/, figures/, tables/ (default: report)")
    parser.add_argument("--no-figures", action="store_true", help="skip figures and tables")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    ks = [int(k) for k in args.ks.split(",") if k.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    cases = load_cases(args)
    results = run_sweep(cases, ks, max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup,
                        methods=methods)
    first = cases[0]
    results["env"] = environment(first.extra.get("device"), first.extra.get("dtype"),
                                 ",".join(dict.fromkeys(c.preset for c in cases)))
    out = Path(args.out)
    name = "bench_" + "_".join(dict.fromkeys(c.preset for c in cases)).replace("/", "-")
    path = save_results(results, out / "results" / f"{name}.json")
    print(f"results: {path}", file=sys.stderr)
    if not args.no_figures:
        figures = save_all_figures(results, out / "figures")
        tables = write_tables(results, out / "tables")
        print(f"figures: {len(figures)} files in {out / 'figures'}; tables: {len(tables)} files in {out / 'tables'}",
              file=sys.stderr)
    print_summary(results)
    return 0


def perf(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers perf",
                                     description="All performance ratios (ours vs HF assisted, vs greedy, vs the bound) from one run.")
    parser.add_argument("--preset", default="toy,smollm2-135m", help="preset name(s), comma-separated")
    parser.add_argument("--draft", default=None,
                        help="draft(s), comma-separated (default: 'hybrid,prompt-lookup': n-gram lookup before the preset's draft, "
                             "that draft model alone (added after a hybrid over a draft model), and n-gram lookup alone; smollm2-135m: "
                             f"'{DEFAULT_DRAFTS['smollm2-135m']}')")
    parser.add_argument("--k", type=int, default=None, help="draft length (default: each preset's k)")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--prompts", nargs="+", default=None, help="default: the 3 PA3 prompts + 2 more")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default="report", help="results JSON goes to OUT/results/perf.json")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--compile", action="store_true",
                        help="also time ours with the target's forward compiled over a static cache (`compiled`; "
                             "minutes of compiling first): rows labelled '<draft> compiled'")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)


    runs, costs, profiles = [], {}, {}
    for preset in [p.strip() for p in args.preset.split(",") if p.strip()]:
        drafts = args.draft or DEFAULT_DRAFTS.get(preset, "hybrid,prompt-lookup")
        sub = argparse.Namespace(**{**vars(args), "preset": preset, "draft": drafts})
        cases = with_inner_models(load_cases(sub))
        k = args.k or get_preset(cases[0].preset).num_speculative_tokens
        # One sweep for all of a preset's drafts: one measured target cost curve serves every bound.
        methods = PERF_METHODS + COMPILED_METHODS if args.compile else PERF_METHODS
        result = run_sweep(cases, [k], max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                           warmup=args.warmup, methods=methods)
        runs += result["runs"]
        costs.update(result["costs"])
        if args.compile:
            costs.update(compiled_costs(result["costs"], cases[0].target, cases[0].prompts[0][1]))
        if not args.no_profile:
            for case in cases:
                profiles[f"{case.preset}/{case.drafter} k={k}"] = profile_decode(
                    case.target, case.draft, case.prompts[0][1], k, args.max_new_tokens)
    results = dict(runs=runs, costs=costs, profiles=profiles, env=environment(preset=args.preset),
                   config=dict(max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup))
    results["ratios"] = ratio_rows(results)
    path = save_results(results, Path(args.out) / "results" / "perf.json")
    print(f"results: {path}", file=sys.stderr)
    print_ratios(results["ratios"])
    if profiles:
        print("\nWhere one round's time goes (ms, share of the round; profiled on the first prompt):\n")
        print_profile(profiles)
    for name, cost in costs.items():
        print(f"\n{name}: target step {cost['target_step_s'] * 1000:.1f} ms, draft step {cost['draft_step_s'] * 1000:.1f} ms "
              f"(c = {cost['c']:.3f}), verify cost v = " + ", ".join(f"{v:.2f} at k={k}" for k, v in cost["verify_cost"].items()))
    return 0


def distill(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m specdec_helpers distill",
                                     description="Train (once, then cached) a draft of a preset from its target's own text; "
                                                 "prints what it cost.")
    parser.add_argument("--preset", default="smollm2-135m", help="a preset whose target is LLaMA-style (default: smollm2-135m)")
    parser.add_argument("--draft", choices=("eagle", "distilled"), default="eagle",
                        help=f"eagle (default): {DRAFTS['eagle'].help}; distilled: {DRAFTS['distilled'].help}")
    parser.add_argument("--force", action="store_true", help="train again even if a cached draft exists")
    parser.add_argument("--corpus", action="store_true",
                        help="eagle only: train teacher-forced on the kit's corpus of existing text (no generation) and "
                             "write the shipped fp16 copy under specdec_helpers/data/ (the recipe of the shipped draft)")
    parser.add_argument("--max-chunks", type=int, default=None, help="with --corpus: train on about N chunks, evenly spread")
    parser.add_argument("--epochs", type=int, default=None, help="with --corpus: training epochs (default: EagleRecipe's)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (the result depends on it)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    pair = load_pair(args.preset, draft="prompt-lookup")
    name = _model_name(pair.target)
    if args.corpus and args.draft != "eagle":
        raise SystemExit("--corpus trains the eagle draft: write --draft eagle --corpus")
    folder, train = ((eagle.eagle_dir(name), eagle.train_eagle) if args.draft == "eagle"
                     else (distilled_dir(name), distill_draft))
    if args.corpus:
        folder = eagle.shipped_dir(name)
        recipe = eagle.EagleRecipe(**({"epochs": args.epochs} if args.epochs else {}))
        train = functools.partial(eagle.train_eagle_corpus, max_chunks=args.max_chunks, recipe=recipe)
    if args.force:
        shutil.rmtree(folder, ignore_errors=True)
    if is_saved(folder):
        print(f"cached: {folder} (--force trains again)", file=sys.stderr)
    else:
        train(pair.target, pair.tokenizer, name=name)
    meta = json.loads((folder / "draft.json").read_text())
    print(json.dumps(meta, indent=1))
    return 0


def report(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers report",
                                     description="Build report.md, a self-contained report.html and (with Chromium) "
                                                 "report.pdf from benchmark results.")
    parser.add_argument("--results", default="report/results", help="results JSON file or folder (default: report/results)")
    parser.add_argument("--out", default="report/build", help="output folder (default: report/build)")
    parser.add_argument("--template", default=None, help=f"Markdown template (default: {TEMPLATE})")
    parser.add_argument("--no-pdf", action="store_true")
    args = parser.parse_args(argv)
    try:
        paths = build_report(args.results, args.out, args.template, pdf=not args.no_pdf)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for kind, path in paths.items():
        if path is not None:
            print(f"{kind}: {path}")
    return 0


def release(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers release", description=release_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the student kit (must be empty or absent)")
    parser.add_argument("--root", default=str(ROOT), help="instructor repository (default: this checkout)")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        if not args.force:
            print(f"release: {out} is not empty; use --force to replace it", file=sys.stderr)
            return 2
        shutil.rmtree(out)
    try:
        written = write_release(out, args.root)
    except ReleaseError as error:
        shutil.rmtree(out, ignore_errors=True)
        print("=" * 70 + "\nRELEASE FAILED: the kit would leak solutions or hidden tests; nothing was written.\n"
              + str(error) + "\n" + "=" * 70, file=sys.stderr)
        return 1
    stubs = sum((out / rel).read_text().count("raise NotImplementedError()") for rel in written
                if rel.endswith((".py", ".ipynb")))
    print(f"student kit: {len(written)} files in {out} ({stubs} exercise stubs); no solution or hidden test left")
    return 0


def grade(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers grade", description=grader_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", help="exercise module (.py), notebook (.ipynb), folder or hand-in .zip")
    parser.add_argument("--config", help="points/thresholds/performance settings (.toml or .json)")
    parser.add_argument("--points", action="append", metavar="ITEM=N", help=f"override points ({', '.join(LABELS)})")
    parser.add_argument("--threshold", action="append", metavar="NAME=X",
                        help="override thresholds (speedup, acceptance, bonus_speedup, bonus_acceptance)")
    parser.add_argument("--preset", help="pair for the performance items (default: toy)")
    parser.add_argument("--no-perf", action="store_true", help="skip the performance items")
    parser.add_argument("--visible-only", action="store_true", help="skip the hidden tests")
    parser.add_argument("--results", default="results.json", help="where to write Gradescope's results.json")
    args = parser.parse_args(argv)


    quiet()
    config = load_config(args.config, _pairs(args.points, "points"), _pairs(args.threshold, "threshold"), args.preset)
    try:
        cls, path = load(args.submission)
    except SubmissionError as error:
        report = Report([Result("load", "submission loads", 0.0, 0.0, "error", str(error))], args.submission)
        Path(args.results).write_text(json.dumps({**report.gradescope(), "max_score": sum(
            v for k, v in config["points"].items() if k not in EXTRA_CREDIT), "output": str(error)}, indent=2))
        print(f"❌ {error}", file=sys.stderr)
        return 1
    print(f"grading {path} ...", flush=True)
    report = grade_submission(cls, config, measure_fn=None if args.no_perf else measure, hidden=not args.visible_only,
                   source=str(path))
    print(report.table())
    if report.measurement.get("detail"):
        print("\nperformance:", json.dumps(report.measurement["detail"], indent=1))
    print(f"\ngraded in {report.seconds:.1f} s; wrote {args.results}")
    Path(args.results).write_text(json.dumps(report.gradescope(), indent=2))
    return 0


def check(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers check", description=check_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", help="exercise module, notebook or folder (default: specdec_helpers/assignment/exercises.py)")
    args = parser.parse_args(argv)

    quiet()
    return 1 if run_check(args.path) else 0


def handin(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers handin", description=handin_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="handin.zip", help="zip to write (default: handin.zip)")
    parser.add_argument("--root", default=".", help="the kit's top folder (default: the current folder)")
    parser.add_argument("--no-check", action="store_true", help="skip the visible checks")
    args = parser.parse_args(argv)

    quiet()
    try:
        out = write_handin(args.root, args.out, not args.no_check)
    except FileNotFoundError as error:
        print(f"❌ {error}", file=sys.stderr)
        return 1
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB, {len(names)} files):")
    for name in names:
        print(f"  {name}")
    print("Upload this zip to Gradescope.")
    return 0


def mistakes(argv=None) -> int:
    """Print the catalog with the grader's verdict on each mutation; exit 1 if one goes uncaught."""
    argparse.ArgumentParser(prog="python -m specdec_helpers mistakes", description=mistakes.__doc__).parse_args(argv)
    missed = 0
    for m, report in grade_all():
        r = report.find(m.test_id)
        caught = not r.passed and m.phrase in r.feedback
        missed += not caught
        print(f"{'✅' if caught else '❌'} {m.name:<26} {report.score:>5.1f} pts  [{m.test_id}] {r.feedback}")
    return 1 if missed else 0


COMMANDS = {
    "demo": (demo, "speculative decoding on an offline pair, tokens coloured"),
    "bench": (bench, "benchmark sweep: methods, k, theory; writes results, figures, tables"),
    "perf": (perf, "performance ratios from one run: ours vs HF assisted, vs greedy, vs the bound; a profile"),
    "distill": (distill, "train (once) a draft from a preset's target: eagle (default) or distilled"),
    "report": (report, "build report/build/report.md, report.html (and a PDF with Chromium)"),
    "release": (release, "instructor: write the student kit (solutions stubbed, hidden tests removed)"),
    "grade": (grade, "instructor: grade a submission, write Gradescope results.json"),
    "mistakes": (mistakes, "instructor: the known-mistake catalog, each graded (exit 1 if one goes uncaught)"),
    "check": (check, "student: run the visible tests on your exercises"),
    "handin": (handin, "student: bundle notebooks, exercises and report/ into a zip"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m specdec_helpers <command> [options]\n\ncommands:")
        for name, (_, summary) in COMMANDS.items():
            print(f"  {name:<10} {summary}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    return int(COMMANDS[argv[0]][0](argv[1:]) or 0)
