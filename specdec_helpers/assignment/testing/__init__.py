"""The assignment's tests, as data (otter-grader keeps its tests apart from its machinery): the test cases and
the world they run in. The grader (`grading/`) runs them in the student's sandbox; they import nothing of it."""
