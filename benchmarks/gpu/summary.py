"""One screen from a GPU check's folder (benchmarks/gpu/run.sh): pass/fail per check, the goals, every part.

run.sh calls it after each part, so a run killed from outside still leaves a summary of what ended. It reads
only what the parts left: `plan` (every part, in order), `status` (a verdict per part that ended), `env.txt`,
the parts' JSON in `results/` and their logs in `parts/`. A part that failed, timed out or never ran shows its
verdict where its numbers would be. Plain Python (no torch): it runs in a fraction of a second.

    python benchmarks/gpu/summary.py LOGS [--final]   # --final: a part with no verdict is "not finished"
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

#: #42's goals, in the order graphs_goals.py prints them, with a short label each
GOALS = {
    "target_step_ms": "target step (ms)",
    "c": "c = draft step / target step",
    "all_accepted_vs_eager_greedy": "all accepted vs our eager greedy",
    "vs_hf_assisted_all_accepted": "ours vs HF assisted, all accepted",
    "vs_hf_assisted_all_rejected": "ours vs HF assisted, all rejected",
}


def read_json(folder: Path, name: str) -> dict | None:
    try:
        return json.loads((folder / "results" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def verdicts(folder: Path, final: bool) -> dict[str, tuple[str, str]]:
    """``{part: (verdict, seconds)}``: the install, then every planned part in plan order."""
    ended = {}
    status = folder / "status"
    for line in status.read_text().splitlines() if status.exists() else []:
        name, verdict, seconds = (line.split("\t") + ["", ""])[:3]
        ended[name] = (verdict, seconds)
    plan = folder / "plan"
    names = [line.split()[-1] for line in plan.read_text().splitlines() if line.strip()] if plan.exists() else []
    pending = ("not finished" if final else "pending", "")
    out = {name: v for name, v in ended.items() if name not in names}  # the install, before every part
    out.update({name: ended.get(name, pending) for name in names})
    return out


def selfcheck_row(data: dict | None) -> tuple[bool, str]:
    rows = (data or {}).get("rows", [])
    failed = [f"{r['section']} {r['check']}" for r in rows if r["status"] == "FAIL"]
    passed = sum(r["status"].startswith("pass") for r in rows)
    near = sum("near-tie" in r["status"] for r in rows)  # fp16/bf16: a difference at a numerical near-tie
    detail = f"{passed} of {len(rows)} rows pass" + (f" ({near} at a near-tie)" if near else "")
    return (not failed and passed > 0), (detail if not failed else "FAIL: " + "; ".join(failed))


def grader_row(data: dict | None) -> tuple[bool, str]:
    rows = (data or {}).get("rows", [])
    head = next((r for r in rows if r["check"].startswith("reference solution")), None)
    return (head is not None and head["status"] == "pass"), (head["detail"] if head else "no grader row")


def agree_row(data: dict | None) -> tuple[bool, str]:
    rows = (data or {}).get("families", [])
    bad = [f"{r['family']}: {'; '.join(r['mismatches'] + r['errors'])}" for r in rows if not r["identical"]]
    detail = f"{len(rows) - len(bad)} of {len(rows)} family runs: greedy and k=1/3/auto equal HF's, sampling runs"
    return (bool(rows) and not bad), (detail if not bad else "FAIL: " + " | ".join(bad))


def nbval_row(folder: Path, parts: list[str]) -> tuple[bool, str]:
    cells = failed = 0
    for part in parts:
        log = folder / "parts" / f"{part}.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        cells += sum(int(n) for n in re.findall(r"(\d+) passed", tail)[-1:])
        failed += sum(int(n) for n in re.findall(r"(\d+) (?:failed|error)", tail)[-1:])
    return failed == 0 and cells > 0, f"{len(parts)} notebook(s), {cells} cells passed, {failed} failed"


def check_lines(folder: Path, parts: dict[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(check, verdict, detail)`` for issue #33's checks; a part that did not pass gives its own verdict."""

    def from_parts(label, names, judge):
        names = [n for n in names if n in parts]
        off = [n for n in names if parts[n][0] != "passed"]
        if not names:
            return None
        if off:  # the first part that did not pass names the verdict: FAILED, TIMED OUT, not run, pending...
            verdict = parts[off[0]][0].split(" (")[0]
            return label, verdict, "; ".join(f"{n}: {parts[n][0]}" for n in off)
        ok, detail = judge(names)
        return label, "passed" if ok else "FAILED", detail

    nbval = sorted(n for n in parts if n.startswith("nbval-"))
    lines = [from_parts("nbval of the notebooks", nbval, lambda names: nbval_row(folder, names))]
    for dtype in ("fp16", "fp32"):
        lines.append(
            from_parts(
                f"grader: reference, {dtype}",
                [f"grader-{dtype}"],
                lambda names: grader_row(read_json(folder, names[0])),
            )
        )
    for dtype in ("fp16", "bf16"):
        lines.append(
            from_parts(
                f"selfcheck {dtype}: greedy/sampling/tree",
                [f"selfcheck-{dtype}"],
                lambda names: selfcheck_row(read_json(folder, names[0])),
            )
        )
    lines.append(
        from_parts("graphs vs eager vs HF", ["graphs-agree"], lambda names: agree_row(read_json(folder, names[0])))
    )
    return [line for line in lines if line]


def goal_lines(folder: Path, parts: dict[str, tuple[str, str]]) -> list[str]:
    if "graphs-goals" not in parts:
        return []
    verdict = parts["graphs-goals"][0]
    data = read_json(folder, "graphs-goals")
    if data is None:
        return [f"  no numbers: graphs-goals {verdict}"]
    env = data.get("environment", {})
    out = [
        (
            f"  ({env.get('gpu') or env.get('device')}, {env.get('dtype')}, scale {data.get('scale')}, "
            f"k={data.get('k')}, {data.get('max_new_tokens')} tokens)"
        )
    ]
    for name, label in GOALS.items():
        row = data.get("goals", {}).get(name)
        if row:
            out.append(
                f"  {label:36s} {row['value']:8.3f}  goal {row['goal']:7s} "
                f"{'reached' if row['reached'] else 'NOT reached'}"
            )
    steps = data.get("steps_ms", {})
    if steps:
        out.append(
            f"  steps (ms) eager/graphed: target {steps.get('target_eager')}/{steps.get('target_graphed')}, "
            f"verify {steps.get('verify_eager')}/{steps.get('verify_graphed')}, "
            f"draft {steps.get('draft_eager')}/{steps.get('draft_graphed')}"
        )
    same = data.get("identical_to_greedy", {})
    differ = [name for name, ok in same.items() if not ok]
    out.append(
        f"  every method's tokens equal greedy: {'yes' if not differ else 'NO: ' + ', '.join(differ)}; "
        f"first graphed call {data.get('first_graphed_call_s')} s ({data.get('graphs_captured')} captures)"
    )
    return out


def summary(folder: Path, final: bool = False) -> str:
    parts = verdicts(folder, final)
    env = (folder / "env.txt").read_text().strip() if (folder / "env.txt").exists() else "environment unknown"
    run = [n for n in parts if n != "install"]
    count = {
        key: sum(parts[n][0].startswith(key) for n in run)
        for key in ("passed", "FAILED", "TIMED OUT", "not run", "skipped")
    }
    lines = [
        f"GPU check: {env}",
        f"parts: {len(run)} planned; "
        + ", ".join(f"{v} {k}" for k, v in count.items() if v)
        + ("" if final else " (still running)"),
    ]
    checks = check_lines(folder, parts)
    if checks:
        lines.append("issue #33's checks:")
        lines += [f"  {check:40s} {verdict:10s} {detail}"[:150] for check, verdict, detail in checks]
    goals = goal_lines(folder, parts)
    if goals:
        lines.append("issue #42's goals (benchmarks/graphs_goals.py):")
        lines += goals
    sync = read_json(folder, "sync-count")
    if sync is not None:
        lines.append(f"synchronisations per speculative round (pythia_random_timing.py): {sync.get('syncs_per_round')}")
    command = folder / "parts" / "command.log"  # run.sh COMMAND...: the command's last lines
    if command.exists():
        lines.append("the command's last lines:")
        lines += [f"  {line}"[:150] for line in command.read_text(errors="replace").splitlines()[-12:]]
    lines.append("every part (verdict, seconds):")
    lines += [f"  {name:16s} {verdict:34s} {seconds}" for name, (verdict, seconds) in parts.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(summary(Path(args[0]), final="--final" in args), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
