"""``python -m specdec_helpers.cli.worker``: a class's grading worker (`assignment.grading.grade_worker`) that
grades each student by running the ``grade`` command in a process forked from it (`course.WORKER` starts it)."""

from __future__ import annotations

import sys

from specdec_helpers.assignment.grading import grade_worker
from specdec_helpers.cli.course import grade

if __name__ == "__main__":
    sys.exit(grade_worker.main(grade))
