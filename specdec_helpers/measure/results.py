"""The results format: what a sweep writes (runs, summary, theory, costs, env), and reading it back."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path

import torch

from specdec_helpers.measure.speedup import pooled_speedup
from specdec_helpers.measure.theory import (
    estimate_alpha,
    expected_speedup,
    expected_tokens_per_step,
    refined_speedup,
)

METHOD_LABELS = {
    "hf_greedy": "HF generate (greedy)",
    "greedy": "ours greedy",
    "spec_vectorized": "ours speculative, no cache",
    "spec_cached": "ours speculative, KV cache",
    "hf_assisted": "HF assisted generation",
    "greedy_compiled": "ours greedy, compiled",
    "spec_compiled": "ours speculative, compiled",
}
# Opt-in (minutes of compiling first, see `compiled`): the target's forward compiled over a static cache.
COMPILED_METHODS = ("greedy_compiled", "spec_compiled")
SPECULATIVE_METHODS = ("spec_vectorized", "spec_cached", "hf_assisted", "spec_compiled")  # the ones that depend on k
BASELINE, SPECULATIVE = "hf_greedy", "spec_cached"  # what PA3's "baseline"/"speculative" keys mean here


def environment(device=None, dtype=None, preset=None) -> dict:
    """What produced a result file: versions, hardware, commit, date."""
    import transformers

    env = dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        device=str(device) if device is not None else None,
        dtype=str(dtype).replace("torch.", "") if dtype else None,
        preset=preset,
        git_commit=_git_commit(),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    if hasattr(os, "sched_getaffinity"):
        env["cpus_available"] = len(os.sched_getaffinity(0))
    if device is not None and torch.device(device).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def _git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5)
        if commit.returncode:
            return None
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def summarize(runs: list[dict]) -> list[dict]:
    """Pool prompts per (preset, drafter, k, method): total median time, speedup vs HF greedy and
    vs our greedy (ratios of summed medians), tokens/s, and acceptance from summed counts."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["preset"], run["drafter"], run["k"]), []).append(run)
    rows = []
    for (preset, drafter, k), group in groups.items():
        names = list(dict.fromkeys(name for run in group for name in run["methods"]))
        totals = {name: _pooled(group, name) for name in names}
        for name in names:
            row = dict(preset=preset, drafter=drafter, k=k, method=name, **totals[name])
            for base, key in ((BASELINE, "speedup"), ("greedy", "speedup_vs_greedy")):
                if totals.get(base, {}).get("time") and row.get("time"):
                    row[key] = totals[base]["time"] / row["time"]
            if row.get("speedup"):
                row["latency_reduction"] = (1 - 1 / row["speedup"]) * 100
                row.update(_spread(group, name, row))
            rows.append(row)
    return rows


def _spread(group: list[dict], name: str, row: dict) -> dict:
    """The speedup's spread over the interleaved rounds (prompts pooled) and its warnings; the bound
    check (tokens per target call) against our own greedy, the like-for-like baseline."""
    base = [run["methods"][BASELINE]["times"] for run in group]
    measured = pooled_speedup(base, [run["methods"][name]["times"] for run in group])
    out = {key: value for key, value in measured.as_dict().items() if key != "speedup"}
    if row.get("speedup_vs_greedy") and row.get("mean_accepted_length"):
        own = pooled_speedup(
            [run["methods"]["greedy"]["times"] for run in group],
            [run["methods"][name]["times"] for run in group],
            row["mean_accepted_length"],
        )
        out["speedup_warnings"] += [w for w in own.warnings if w.startswith("measurement broken")]
    return out


def _pooled(group: list[dict], name: str) -> dict:
    entries = [run["methods"].get(name, {}) for run in group]
    if any("median_time" not in e for e in entries):
        note = next((e.get("skipped") for e in entries if e.get("skipped")), "did not run")
        return dict(skipped=note)
    time_ = sum(e["median_time"] for e in entries)
    tokens = sum(statistics.median(e["new_tokens"]) for e in entries)
    row = dict(
        time=time_,
        q1_time=sum(e["q1_time"] for e in entries),
        q3_time=sum(e["q3_time"] for e in entries),
        new_tokens=tokens,
        tokens_per_second=tokens / time_ if time_ else 0.0,
        identical=all(e["identical"] for e in entries),
        matches_greedy=all(e.get("matches_greedy", e["identical"]) for e in entries),
    )
    stats = [e["stats"] for e in entries if "stats" in e]
    if stats and len(stats) == len(entries):
        proposed = sum(s["proposed"] for s in stats)
        accepted = sum(s["accepted"] for s in stats)
        row["acceptance_rate"] = accepted / proposed if proposed else 0.0
        calls = sum(s["target_calls"] for s in stats)  # 0 only with no new token (`observed_decode` sees every round)
        row["mean_accepted_length"] = sum(s["new_tokens"] for s in stats) / calls if calls else 0.0
        if all("alpha" in s for s in stats):
            per_step = [a for s in stats for a in s["accepted_per_step"]]
            lengths = [m for s in stats for m in s["draft_lengths"]]
            row["alpha"] = estimate_alpha(per_step, lengths)
    return row


def theory_rows(results: dict) -> list[dict]:
    """Predicted vs measured, per (preset, drafter, k), from the cached speculative runs."""
    rows = []
    for row in results["summary"]:
        if row["method"] != SPECULATIVE or "alpha" not in row:
            continue
        cost = results["costs"].get(f"{row['preset']}/{row['drafter']}")
        if cost is None:
            continue
        k, alpha, c = row["k"], row["alpha"], cost["c"]
        v = cost["verify_cost"].get(k) or cost["verify_cost"].get(str(k))  # JSON turns int keys into strings
        rows.append(
            dict(
                preset=row["preset"],
                drafter=row["drafter"],
                k=k,
                alpha=alpha,
                c=c,
                v=v,
                expected_tokens_per_step=expected_tokens_per_step(alpha, k),
                measured_tokens_per_step=row["mean_accepted_length"],
                predicted_speedup=expected_speedup(alpha, k, c),
                refined_speedup=refined_speedup(alpha, k, c, v),
                measured_speedup_vs_greedy=row.get("speedup_vs_greedy"),
                measured_speedup=row.get("speedup"),
            )
        )
    return rows


def best_k(results: dict, preset=None, drafter=None) -> int | None:
    """The k with the highest measured speedup of the cached speculative decoder."""
    rows = [
        r
        for r in results["summary"]
        if r["method"] == SPECULATIVE
        and r.get("speedup")
        and (preset is None or r["preset"] == preset)
        and (drafter is None or r["drafter"] == drafter)
    ]
    return max(rows, key=lambda r: r["speedup"])["k"] if rows else None


def save_results(results: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=_json_default))
    return path


def load_results(path) -> dict:
    """One results JSON, or every ``*.json`` in a folder merged (runs, summary, theory, costs pooled)."""
    path = Path(path)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    loaded = [_read_json(f) for f in files]
    if path.is_dir():  # `perf` writes perf.json beside the sweeps: it has ratios, not a sweep's summary
        loaded = [r for r in loaded if isinstance(r, dict) and "summary" in r]
    elif not (isinstance(loaded[0], dict) and "summary" in loaded[0]):
        raise ValueError(
            f"{path} is not a `bench` results file (it has no 'summary'); give the folder or file "
            "that `python -m specdec_helpers bench` wrote"
        )
    if not loaded:
        raise FileNotFoundError(
            f"no `bench` results JSON in {path}; run notebook 05 to its export (students) or "
            "`python -m specdec_helpers bench` (instructors) first"
        )
    if len(loaded) == 1:
        return loaded[0]
    merged = dict(
        config=loaded[0]["config"],
        envs=[r["env"] for r in loaded if "env" in r],
        env=loaded[0].get("env"),
        runs=[],
        summary=[],
        theory=[],
        costs={},
    )
    for r in loaded:
        merged["runs"] += r["runs"]
        merged["summary"] += r["summary"]
        merged["theory"] += r["theory"]
        merged["costs"].update(r["costs"])
    return merged


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}); run `bench` again or remove it") from None


def _json_default(obj):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (torch.dtype, torch.device, Path)):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")
