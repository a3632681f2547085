"""The test files that take minutes, run first, longest first (`conftest.pytest_collection_modifyitems`).

A long file handed out last keeps one xdist worker busy after the others have finished. The README's
command passes ``--no-loadscope-reorder``, so xdist hands out files in this order rather than sorted by
their number of tests. The order is by CPU seconds, every process a file starts included, as
`python benchmarks/suite_cpu.py` measures them (its simulation of the README's run checks the order):
the suite is CPU-bound, and with this order the three workers end within a few seconds of each other
(benchmarks/RESULTS.md, "Where CI's time goes"). A plain module, not conftest.py (see tiny_models.py)."""

LONGEST_FIRST = (
    "test_classroom.py",
    "test_course.py",
    "test_assignment.py",
    "test_tree_sampling.py",
    "test_student_edition.py",
    "test_fair_grading.py",
    "test_measured_by_the_grader.py",  # estimated from its tests' wall times (#43), not yet by suite_cpu.py
    "test_selfcheck.py",
    "test_notebook_reruns.py",  # about 75 CPU s (#44)
    "test_notebooks_fp16.py",
    "test_gpu_check.py",
    "test_sandbox_cheats.py",
    "test_grading_fairness.py",
    "test_student_check.py",
    "test_pairs.py",
    "test_sandbox.py",
    "test_child_view.py",  # estimated (#43): one sandboxed grading
    "test_device_watch.py",  # estimated (#43): one in-process grading
)
