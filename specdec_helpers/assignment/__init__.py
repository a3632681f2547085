"""The course, by lifecycle (as otter-grader splits it), imports flowing one way:
parts <- testing <- grading <- student <- authoring (tests/test_layers.py keeps it).

- `parts/`: what a graded part is: the graded cells (`cells`) and the `SpeculativeDecoder` assembled from them
  (`decoder`).
- `testing/`: the tests, as data (`cases`, `suite`, `suite_decode`), the world they run in (`world`), the replay
  of rounds (`replay`), the simulated GPU (`devices`) and what crosses to the sandboxed child (`wire`).
- `grading/`: the machinery that runs them (`grader`) and counts the points (`scoring`): the sandboxed child that
  runs student code as a user without rights on the grader (`child`, `sandbox`, `privilege`, `jail_policy`,
  `isolation`, `student_users`), the side-by-side timing (`speed`), the nbval run
  (`submission`), a class at once (`classroom`, `grade_worker`, `contain`) and copied work (`similarity`).
- `student/`: what the released kit gives students: the notebooks' helpers (`notebook`, imported as ``nb``),
  ``check`` and ``handin``.
- `authoring/`: the instructor's tools: ``release`` (the student repository, answers stripped), the mistake
  catalog the hidden tests must catch (`mutations`), notebook sync,
  the Gradescope bundle (`autograder`), ``selfcheck``, templates.
"""
