"""Instructor-side grading: the grader, the test suites, the tiny test worlds, the child-process sandbox, speed measurement, the mistake catalog."""
