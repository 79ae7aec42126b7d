"""FinanceBench: amounts (parsing, units, numeric match) (the task's room)."""
