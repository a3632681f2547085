"""The course, by lifecycle (as otter-grader splits it):

- `student/`: what the released kit needs: the graded cells (`cells`), the `SpeculativeDecoder` assembled from
  them (`decoder`), the notebooks' helpers (`notebook`, imported as ``nb``), ``check`` and ``handin``.
- `authoring/`: the instructor's tools: ``release`` (the student repository, answers stripped), notebook sync,
  the Gradescope bundle (`autograder`), ``selfcheck``, templates.
- `grading/`: the grader: tests as data (`cases`, `suite`, `suite_decode`), the world they run in, the sandboxed
  child that runs student code as a user without rights on the grader (`child`, `sandbox`, `privilege`,
  `isolation`), the side-by-side timing (`speed`), the nbval run (`submission`), the mistake catalog
  (`mutations`), a class at once (`classroom`, `grade_worker`, `contain`) and copied work (`similarity`).
"""
