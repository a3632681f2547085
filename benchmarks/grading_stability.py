"""Is the grade stable? Grade the reference solution N times and a decoder that does not speculate N
times (the target's own greedy loop in generate_ids), on the toy preset, and print the score spread.

    python benchmarks/grading_stability.py --runs 10

The grader's thresholds must give the reference full marks every time and the non-speculating
decoder no performance points, ever. (nbval is left out: its lines carry no points.)
"""

from __future__ import annotations

import argparse
import statistics
import time

from specdec_helpers.assignment.grading import grader, speed
from specdec_helpers.assignment.grading.submission import reference_sources

NOT_SPECULATING = """
import torch

@torch.inference_mode()
def verify_tokens_cached(self, input_ids, draft_tokens, attention_mask=None):
    return [], 0   # written, never used: the loop below does not speculate

@torch.inference_mode()
def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
    return self.target_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                      max_new_tokens=max_tokens, eos_token_id=self.eos_token_id,
                                      pad_token_id=self.eos_token_id or 0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", choices=["reference", "not speculating"], help="grade only this one")
    args = parser.parse_args()
    reference = reference_sources()
    config = grader.load_config()
    for name, sources in (("reference", reference), ("not speculating", dict(reference, decode=NOT_SPECULATING))):
        if args.only and name != args.only:
            continue
        scores, perf, ratios = [], [], []
        for run in range(args.runs):
            start = time.perf_counter()
            report = grader.grade(sources, config, reference_sources=reference, measure_fn=speed.measure)
            m = report.measurement or {}
            if name != "reference" and not m:  # the decode tests fail first; measure anyway to show the speed
                measured = speed.measure(sources, reference, config["performance"])
                m = {"speedup": measured.speedup, "acceptance": measured.acceptance}
            scores.append(report.score)
            perf.append(sum(r.score for r in report.results if r.item in ("speedup", "acceptance")))
            ratios.append(m.get("speedup", 0.0))
            print(
                f"{name:16s} run {run + 1:2d}: {report.score:5.1f} / {report.max_score:g}  performance "
                f"{perf[-1]:4.1f}  speed vs reference {ratios[-1]:.2f}x  acceptance {m.get('acceptance', 0):.1%}  "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        print(
            f"{name}: score min {min(scores)} max {max(scores)}; performance points min {min(perf)} max {max(perf)}; "
            f"speed ratio median {statistics.median(ratios):.2f} range {min(ratios):.2f}-{max(ratios):.2f}\n"
        )


if __name__ == "__main__":
    main()
