"""The machinery that grades: the grader (`grader`) and its points (`scoring`), the sandboxed child that runs
student code (`child`, `sandbox`), who runs it with which rights (`privilege`, `jail_policy`, `isolation`,
`student_users`), the side-by-side timing (`speed`), the nbval run (`submission`), a class at once and copied
work (`classroom`, `grade_worker`, `contain`, `similarity`: the instructor's)."""
