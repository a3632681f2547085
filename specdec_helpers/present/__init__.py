"""What people see: plots, tables, the report, widgets, the demo, notebook helpers."""
