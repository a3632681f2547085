"""Do the tests judge right in every world? Grade the reference solution and every mutation of the
catalog (`grading/mutations.py`, answered in this process) in N freshly drawn grading worlds, and print each world in which the
reference loses a point or a mutation escapes its test or its message.

    python benchmarks/grading_worlds.py --worlds 20            # fresh random worlds
    python benchmarks/grading_worlds.py --seeds 3 17 --only tokens_to_cpu

CI grades fixed worlds (tests/test_assignment.py: WORLDS and REFERENCE_WORLDS; every `grade` command in the suite:
world 0, `SPECDEC_GRADE_SEED` in conftest.py) so that its runs are deterministic; this scan is how a world-dependent
judgement is found. Add a world it reports, with a comment: to WORLDS where a mutation escapes, to REFERENCE_WORLDS
where the reference loses a point.
"""

from __future__ import annotations

import argparse
import os
import secrets
import time

import torch

from specdec_helpers.assignment.authoring import mutations
from specdec_helpers.assignment.grading import grader
from specdec_helpers.assignment.grading.submission import reference_sources


def scan(seed: int, reference: dict, points: dict, only: list[str]) -> list[str]:
    """The wrong judgements in world ``seed``."""
    wrong = []
    if not only:
        lost = [r for r in grader.run_suite(reference, points, seed=seed) if not r.passed]
        wrong += [f"reference fails {r.test_id}: {r.feedback[:200]}" for r in lost]
    for m in mutations.CATALOG:
        if only and m.name not in only:
            continue
        r = mutations.grade_mutation(m, reference, seed=seed, in_process=True).find(m.test_id)
        if r.passed or m.phrase not in r.feedback:
            wrong.append(f"{m.name} {'escapes' if r.passed else 'misnamed'} {m.test_id}: {r.feedback[:200]}")
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, default=5, help="how many fresh worlds (ignored with --seeds)")
    parser.add_argument("--seeds", type=int, nargs="*", help="these worlds instead")
    parser.add_argument("--only", nargs="*", default=[], help="only these mutations (and not the reference)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("SPECDEC_THREADS", "1")))  # as a grading child: near-ties break alike
    reference, points = reference_sources(), grader.load_config()["points"]
    seeds = args.seeds or [secrets.randbelow(10**6) for _ in range(args.worlds)]
    bad = 0
    for seed in seeds:
        start = time.perf_counter()
        wrong = scan(seed, reference, points, args.only)
        bad += bool(wrong)
        print(
            f"world {seed}: {'ok' if not wrong else f'{len(wrong)} wrong'} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        for line in wrong:
            print(f"  {line}")
    print(f"{bad} of {len(seeds)} worlds judged wrongly")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
