"""Assignment tooling: release the student kit, grade submissions, self-check, hand in.

Command modules (each with ``main(argv) -> int``): `release` (instructor), `grader` (``grade``),
`check` and `handin` (students). `suite` holds the tests, `mutations` the known-mistake catalog.
"""
