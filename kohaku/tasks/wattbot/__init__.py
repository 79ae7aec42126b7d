"""WattBot 2025: its metric, submission format and error classes (the task's room)."""
