"""The course, by lifecycle (as otter-grader splits it), imports flowing one way: parts <- grading <- student <- authoring
(tests/test_layers.py keeps it).

- `parts/`: what a graded part is: the graded cells (`cells`) and the `SpeculativeDecoder` assembled from them
  (`decoder`).
- `grading/`: the grader: tests as data (`cases`, `suite`, `suite_decode`), the world they run in, the sandboxed
  child that runs student code as a user without rights on the grader (`child`, `sandbox`, `privilege`,
  `isolation`), the side-by-side timing (`speed`) and the replay of rounds (`replay`), the simulated GPU
  (`devices`), the nbval run (`submission`), the mistake catalog (`mutations`), a class at once (`classroom`,
  `grade_worker`, `contain`) and copied work (`similarity`).
- `student/`: what the released kit gives students: the notebooks' helpers (`notebook`, imported as ``nb``),
  ``check`` and ``handin``.
- `authoring/`: the instructor's tools: ``release`` (the student repository, answers stripped), notebook sync,
  the Gradescope bundle (`autograder`), ``selfcheck``, templates.
"""
