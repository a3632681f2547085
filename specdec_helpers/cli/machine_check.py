"""``python -m specdec_helpers selfcheck``: run the kit's checks on this machine's device and dtype, print one
table, write a JSON that benchmarks/RESULTS.md rows cite. Exit 1 when any check FAILs."""

from __future__ import annotations

import argparse
import sys

from specdec_helpers.cli.args import at_least, check_device_and_out, preset_names
from specdec_helpers.present.notebook_help import quiet


def selfcheck(argv=None) -> int:
    try:  # instructor-only: the student kit leaves assignment/authoring out (release.INSTRUCTOR_ONLY)
        from specdec_helpers.assignment.authoring import selfcheck as selfcheck_module
        from specdec_helpers.assignment.authoring.selfcheck import DTYPES, SECTIONS, Options
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("specdec_helpers."):
            raise
        print("selfcheck: an instructor's command; the student kit does not have it", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers selfcheck",
        description=selfcheck_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--preset",
        type=preset_names,
        default="toy",
        help="pair to check (default: toy; e.g. pythia-1.4b/160m on a GPU)",
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:1 (default: CUDA when there is a GPU)")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=list(DTYPES),
        help="model dtype for the device checks (auto: fp16 on a GPU, fp32 on the CPU)",
    )
    parser.add_argument("--skip", default="", help=f"comma-separated sections to skip: {', '.join(SECTIONS)}")
    parser.add_argument(
        "--notebooks",
        default="auto",
        help="notebooks to run headless: all, e.g. 01,03, or auto (all on a GPU; 01,03 on a CPU)",
    )
    parser.add_argument("--prompts", type=at_least(1), default=2, help="prompts per check (default 2)")
    parser.add_argument("--max-new-tokens", type=at_least(2), default=32, help="tokens per greedy check (default 32)")
    parser.add_argument(
        "--samples", type=at_least(100), default=2000, help="draws for the rejection-sampling chi-square (default 2000)"
    )
    parser.add_argument(
        "--decodes",
        type=at_least(10),
        default=150,
        help="whole sampled decodes for the end-to-end chi-square (default 150)",
    )
    parser.add_argument("--repeats", type=at_least(1), default=2, help="timed runs per method vs HF (default 2)")
    parser.add_argument(
        "--json",
        help="where to write the JSON (default: "
        "benchmarks/results/selfcheck-PRESET-DEVICE-DTYPE.json, a file RESULTS.md rows cite)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    args.out = "."  # check_device_and_out checks --out too: nothing to check here
    check_device_and_out(parser, args)

    quiet()
    options = Options(
        preset=args.preset,
        device=args.device,
        dtype=args.dtype,
        skip=tuple(s.strip() for s in args.skip.split(",") if s.strip()),
        notebooks=args.notebooks,
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        samples=args.samples,
        decodes=args.decodes,
        repeats=args.repeats,
    )
    progress = None
    if not args.no_progress:
        from tqdm.auto import tqdm

        def progress(total):
            return tqdm(total=total, file=sys.stderr, leave=False)

    result = selfcheck_module.run(options, progress)
    print(table(result))
    env = result["environment"]
    default = f"benchmarks/results/selfcheck-{args.preset.replace('/', '_')}-{env['device']}-{env['dtype']}.json"
    path = selfcheck_module.write_json(result, args.json or default.replace(":", ""))
    print(
        f"\n{'PASSED' if result['passed'] else 'FAILED'}: {args.preset} on {env.get('gpu') or env['device']} "
        f"({env['dtype']}) in {result['seconds']:.0f} s; wrote {path}"
    )
    return 0 if result["passed"] else 1


def table(result: dict) -> str:
    """One plain-text table: section, check, verdict, seconds, detail."""
    rows = [
        (r["section"], r["check"], r["status"], f"{r['seconds']:.1f}" if r["seconds"] else "", r["detail"])
        for r in result["rows"]
    ]
    widths = [
        max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
        for i, h in enumerate(("section", "check", "result", "s"))
    ]
    head = ("section", "check", "result", "s", "detail")
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  " + head[-1]]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    return "\n".join(lines)
