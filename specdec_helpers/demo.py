"""``python -m specdec_helpers demo``: one prompt, decoded speculatively and greedily, side by side.

Shows which tokens the draft got right (accepted), where the target overruled it (correction) and
where every draft token passed so the target's extra token came free (bonus), then how much faster
that was than plain greedy decoding, and that the text is identical.
"""
from __future__ import annotations

import argparse
import os
import sys

from .pairs import OFFLINE_PRESETS, PRESETS, load_pair

PA3_PROMPT = "The future of Artificial Intelligence is"

# ANSI styles per span kind (see widgets.KINDS); the plain-text markers are for logs and pipes.
ANSI = {"prompt": "\033[2m", "accepted": "\033[32m", "rejected": "\033[9;31m", "correction": "\033[33;1m",
        "bonus": "\033[34;1m", "target": ""}
MARKERS = {"accepted": "[]", "rejected": "~~", "correction": "{}", "bonus": "<>"}
LEGEND = {"accepted": "accepted draft tokens", "correction": "correction (target)", "bonus": "bonus (target)",
          "rejected": "rejected draft tokens"}
RESET = "\033[0m"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers demo", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=OFFLINE_PRESETS[0],
                        help=f"pair to load (default: {OFFLINE_PRESETS[0]}; offline: {', '.join(OFFLINE_PRESETS)}; "
                             f"also auto, {', '.join(p for p in PRESETS if p not in OFFLINE_PRESETS)})")
    parser.add_argument("--prompt", help="text to continue (default: a prompt that suits the preset)")
    parser.add_argument("-k", "--num-speculative-tokens", type=int, dest="k",
                        help="draft tokens per round (default: the preset's)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--draft", help="override the preset's draft: 'eagle', 'distilled', 'hybrid', 'int8', 'prompt-lookup' (HF's), "
                                         "'prompt-lookup:N' (n-grams of N tokens or more, proposals growing with the match), "
                                         "'hybrid:<name>' (lookup, then that draft), or a hub id / folder")
    parser.add_argument("--show-rejected", action="store_true", help="also show rejected draft tokens, struck out")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="ANSI colours (auto: when stdout is a terminal and NO_COLOR is unset)")
    return parser.parse_args(argv)


def default_prompt(preset: str | None) -> str:
    if preset == "toy":
        from .toy import TOY_PROMPTS

        return TOY_PROMPTS[0]
    return PA3_PROMPT


def use_color(choice: str, stream=sys.stdout) -> bool:
    if choice != "auto":
        return choice == "always"
    return stream.isatty() and "NO_COLOR" not in os.environ


def render(spans, color: bool, show_rejected: bool = False) -> str:
    """Text with each run of same-kind tokens of one round wrapped in its colour or marker."""
    groups: list[list] = []
    for span in spans:
        if span.kind == "rejected" and not show_rejected:
            continue
        if groups and (groups[-1][0].kind, groups[-1][0].step) == (span.kind, span.step):
            groups[-1].append(span)
        else:
            groups.append([span])
    parts = []
    for group in groups:
        kind, text = group[0].kind, "".join(s.text for s in group)
        if color and ANSI[kind]:
            parts.append(f"{ANSI[kind]}{text}{RESET}")
        elif not color and kind in MARKERS:
            parts.append(MARKERS[kind][0] + text + MARKERS[kind][-1])
        else:
            parts.append(text)
    return "".join(parts)


def legend(color: bool, show_rejected: bool) -> str:
    kinds = [k for k in LEGEND if show_rejected or k != "rejected"]
    if color:
        return "  ".join(f"{ANSI[k]}{LEGEND[k]}{RESET}" for k in kinds)
    return "  ".join(f"{MARKERS[k][0]}{LEGEND[k]}{MARKERS[k][-1]}" for k in kinds)


def summary_table(spec, greedy, identical: bool) -> str:
    s, g = spec.stats, greedy.stats
    speedup = g.wall_time_s / s.wall_time_s if s.wall_time_s > 0 else float("nan")
    rows = [
        ("", "speculative", "greedy"),
        ("new tokens", f"{s.new_tokens}", f"{g.new_tokens}"),
        ("target calls", f"{s.target_calls}", f"{g.target_calls}"),
        ("time (s)", f"{s.wall_time_s:.2f}", f"{g.wall_time_s:.2f}"),
        ("tokens/s", f"{s.tokens_per_s:.1f}", f"{g.tokens_per_s:.1f}"),
        ("acceptance rate", f"{s.acceptance_rate:.0%} ({s.accepted}/{s.proposed})", ""),
        ("mean accepted length", f"{s.mean_accepted_length:.2f}", "1.00"),
        ("speedup vs greedy", f"{speedup:.2f}x", ""),
        ("identical to greedy", "yes" if identical else "NO (a bug, or fp ties)", ""),
    ]
    return "\n".join(f"{a:<22}{b:>16}  {c:>8}" for a, b, c in rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from .bench import draft_label
    from .decode import greedy_decode, speculative_decode
    from .widgets import token_spans

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


if __name__ == "__main__":
    sys.exit(main())
