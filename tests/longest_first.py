"""The test files that take minutes, run first, longest first (`conftest.pytest_collection_modifyitems`).

A long file handed out last keeps one xdist worker busy after the other has finished. The README's
command passes ``--no-loadscope-reorder``, so xdist hands out files in this order rather than sorted by
their number of tests. Per-file times: benchmarks/RESULTS.md ("The test suite's run time"). A plain module, not
conftest.py (see tiny_models.py)."""

LONGEST_FIRST = (
    "test_assignment.py",
    "test_classroom.py",
    "test_course.py",
    "test_tree_sampling.py",
    "test_notebooks_fp16.py",
    "test_student_edition.py",
    "test_selfcheck.py",
    "test_pairs.py",
    "test_grading_fairness.py",
    "test_batch.py",
    "08_serving_batches_and_trees.ipynb",
    "test_colab.py",
    "test_eagle.py",
)
