"""The GPU check (benchmarks/gpu/run.sh) rehearsed on the CPU: a lent GPU gives 10 minutes a call and 15 in all,
so the one prepared command must work the first time (issue #42, item 7).

The quick CPU mode runs the same script with tiny sizes: install (a fake wheel, pip's dry run), parts side by side,
the timings alone, the archive and summary written again after each part (seen through ON_PACK), and a summary
with a verdict for every part. A tiny deadline is the control: a part that overruns its share is killed and says
so, and a part with no time left is not run. The summarizer itself is checked on hand-made folders.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "run.sh"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import summary as gpu_summary  # noqa: E402

FAKE = "specdec_gpu_check_fake"


def run_check(tmp_path, *args, timeout=600, **env):
    full = {
        **os.environ,
        "DEVICE": "cpu",
        "QUICK": "1",
        "OUT": str(tmp_path / "out"),
        "PYTHON": sys.executable,
        "WHEELS": str(tmp_path / "no-wheels"),
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT), *args], env=full, capture_output=True, text=True, timeout=timeout)


def plan(tmp_path, **env) -> dict[str, str]:
    done = run_check(tmp_path, DRY_RUN="1", timeout=60, **env)
    assert done.returncode == 0, done.stderr
    return {line.split()[1].rstrip(":"): line.split()[0] for line in done.stdout.splitlines()}


def parts_table(summary: str) -> dict[str, str]:
    """``{part: verdict}`` from the summary's last block."""
    block = summary.split("every part (verdict, seconds):\n")[1]
    return {line.split()[0]: re.split(r"\s{2,}", line.strip())[1] for line in block.splitlines() if line.strip()}


def archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def fake_wheel(folder: Path, broken: bool = False) -> None:
    folder.mkdir(parents=True)
    path = folder / f"{FAKE}-0.1-py3-none-any.whl"
    if broken:
        path.write_text("not a zip")
        return
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{FAKE}/__init__.py", "")
        z.writestr(f"{FAKE}-0.1.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {FAKE}\nVersion: 0.1\n")
        z.writestr(
            f"{FAKE}-0.1.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{FAKE}-0.1.dist-info/RECORD", "")


def test_the_plan_on_a_gpu_holds_every_check_of_issue_33_side_by_side_and_the_timings_alone(tmp_path):
    parts = plan(tmp_path, DEVICE="cuda", QUICK="")
    assert {f"nbval-0{n}" for n in range(1, 9)} <= set(parts)
    assert {"grader-fp16", "grader-fp32", "selfcheck-fp16", "selfcheck-bf16", "graphs-agree"} <= set(parts)
    assert {name for name, phase in parts.items() if phase == "alone"} == {"graphs-goals", "sync-count"}
    assert all(phase == "side" for name, phase in parts.items() if name not in ("graphs-goals", "sync-count"))


@pytest.mark.slow
def test_the_quick_cpu_mode_installs_dry_packs_after_each_part_and_gives_every_part_a_verdict(tmp_path):
    fake_wheel(tmp_path / "whl")
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    hook = 'd="$SNAPS/$(ls "$SNAPS" | wc -l)"; mkdir "$d"; cp "$1/summary.txt" "$1/gpu-logs.tgz" "$d/"'
    done = run_check(tmp_path, WHEELS=str(tmp_path / "whl"), INSTALL_DRY_RUN="1", ON_PACK=hook, SNAPS=str(snaps))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]

    # the install branch ran, and changed nothing: pip's dry run named the wheel it would install
    final = archive(tmp_path / "out" / "gpu-logs.tgz")
    assert f"Would install {FAKE}-0.1" in final["pip.log"].decode()
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version(FAKE)

    # every planned part has a verdict; QUICK leaves the grader out and says so
    summary = (tmp_path / "out" / "summary.txt").read_text()
    verdicts = parts_table(summary)
    planned = plan(tmp_path)
    assert set(planned) | {"install"} == set(verdicts)
    assert verdicts["install"] == "passed" and verdicts["grader-fp16"].startswith("skipped")
    ran = [name for name in planned if not verdicts[name].startswith("skipped")]
    assert ran and all(verdicts[name] == "passed" for name in ran), summary
    assert summary == final["summary.txt"].decode()
    for label in gpu_summary.GOALS.values():
        assert label in summary
    assert "every method's tokens equal greedy: yes" in summary

    # $OUT after each part: a summary that gives its verdict while the parts after it are still pending, and an
    # archive that holds its log (side parts end before the timings start; the two timings run one after the other)
    snapshots = [parts_table((snaps / str(i) / "summary.txt").read_text()) for i in range(len(list(snaps.iterdir())))]
    assert all(snapshots[0][name] == "pending" for name in ran), snapshots[0]
    for name in ran:
        i = next(i for i, table in enumerate(snapshots) if table[name] != "pending")
        assert snapshots[i][name] == "passed" and f"parts/{name}.log" in archive(snaps / str(i) / "gpu-logs.tgz")
        later = ["graphs-goals"] if planned[name] == "side" else ["sync-count"] if name == "graphs-goals" else []
        assert all(snapshots[i][after] == "pending" for after in later), (name, snapshots[i])


@pytest.mark.slow
def test_a_tiny_deadline_kills_the_part_that_overruns_and_does_not_start_the_one_that_cannot_fit(tmp_path):
    """The control: the grader needs 25 s of CPU; with a 10 s deadline the side phase has ~6 s."""
    done = run_check(
        tmp_path, DEADLINE="10", MIN_S="2", JOBS="1", SKIP="", ONLY="^(grader-fp32|selfcheck-fp16|graphs-goals)$"
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    verdicts = parts_table(summary)
    assert verdicts["grader-fp32"].startswith("TIMED OUT (killed after"), summary
    assert verdicts["selfcheck-fp16"] == "not run (time)", summary
    assert verdicts["graphs-goals"] == "passed" or verdicts["graphs-goals"].startswith("TIMED OUT"), summary
    assert verdicts["grader-fp16"] == "skipped (ONLY)" and verdicts["nbval-01"] == "skipped (ONLY)"
    assert re.search(r"grader: reference, fp32\s+TIMED OUT", summary) and "parts/grader-fp32.log" in archive(
        tmp_path / "out" / "gpu-logs.tgz"
    )


@pytest.mark.slow
def test_an_install_that_fails_stops_the_check_with_exit_3_and_says_so(tmp_path):
    fake_wheel(tmp_path / "whl", broken=True)
    done = run_check(tmp_path, WHEELS=str(tmp_path / "whl"), INSTALL_DRY_RUN="1", timeout=120)
    assert done.returncode == 3, done.stdout[-3000:]
    verdicts = parts_table((tmp_path / "out" / "summary.txt").read_text())
    assert verdicts.pop("install").startswith("FAILED")
    assert set(verdicts.values()) <= {"not run (install failed)", "skipped (SKIP=^grader-)"}
    assert "invalid" in archive(tmp_path / "out" / "gpu-logs.tgz")["pip.log"].decode()


# --------------------------------------------------------------------------- the summarizer on hand-made folders


def folder(tmp_path, status: dict[str, str], results: dict[str, dict] = (), logs: dict[str, str] = ()) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "parts").mkdir()
    (tmp_path / "plan").write_text("".join(f"side {name}\n" for name in status))
    (tmp_path / "status").write_text("".join(f"{n}\t{v}\t1\n" for n, v in status.items() if v != "pending"))
    for name, data in dict(results).items():
        (tmp_path / "results" / f"{name}.json").write_text(json.dumps(data))
    for name, text in dict(logs).items():
        (tmp_path / "parts" / f"{name}.log").write_text(text)
    return tmp_path


def grader_json(score):
    return {
        "rows": [
            {
                "section": "grader",
                "check": "reference solution at toy",
                "status": "pass" if score == 45 else "FAIL",
                "detail": f"{score}/45 points",
                "seconds": 1,
            }
        ]
    }


def test_the_summary_gives_each_check_the_verdict_of_its_part_or_of_its_numbers(tmp_path):
    goals = {name: dict(value=1.0, goal="<= 2.5", reached=name == "c") for name in gpu_summary.GOALS}
    logs = folder(
        tmp_path,
        {
            "nbval-01": "passed",
            "nbval-02": "TIMED OUT (killed after 90 s)",
            "grader-fp16": "passed",
            "grader-fp32": "passed",
            "selfcheck-fp16": "FAILED (exit 1)",
            "graphs-agree": "passed",
            "graphs-goals": "passed",
            "sync-count": "pending",
        },
        results={
            "grader-fp16": grader_json(45),
            "grader-fp32": grader_json(25),
            "graphs-goals": {"goals": goals, "identical_to_greedy": {"hf_greedy": False}},
        },
        logs={"nbval-01": "22 passed in 9.07s\n"},
    )
    text = gpu_summary.summary(logs)
    lines = {
        label: next(line for line in text.splitlines() if line.startswith(f"  {label}  "))
        for label in (
            "nbval of the notebooks",
            "grader: reference, fp16",
            "grader: reference, fp32",
            "selfcheck fp16: greedy/sampling/tree",
            "graphs vs eager vs HF",
        )
    }
    assert "TIMED OUT" in lines["nbval of the notebooks"] and "nbval-02" in lines["nbval of the notebooks"]
    assert "passed" in lines["grader: reference, fp16"] and "45/45" in lines["grader: reference, fp16"]
    assert "FAILED" in lines["grader: reference, fp32"] and "25/45" in lines["grader: reference, fp32"]
    assert "FAILED (exit 1)" in lines["selfcheck fp16: greedy/sampling/tree"]
    assert "FAILED" in lines["graphs vs eager vs HF"]  # the part passed, but left no JSON to read
    assert re.search(r"c = draft step / target step\s+1\.000\s+goal <= 2.5\s+reached", text)
    assert re.search(r"target step \(ms\)\s+1\.000\s+goal <= 2.5\s+NOT reached", text)
    assert "tokens equal greedy: NO: hf_greedy" in text
    assert parts_table(text)["sync-count"] == "pending" and "(still running)" in text
    assert parts_table(gpu_summary.summary(logs, final=True))["sync-count"] == "not finished"


def test_the_summary_of_a_run_killed_before_any_part_ended_still_lists_every_part(tmp_path):
    logs = folder(tmp_path, {"grader-fp16": "pending", "graphs-goals": "pending"})
    text = gpu_summary.summary(logs, final=True)
    assert parts_table(text) == {"grader-fp16": "not finished", "graphs-goals": "not finished"}
    assert re.search(r"grader: reference, fp16\s+not finished", text) and "no numbers: graphs-goals" in text
