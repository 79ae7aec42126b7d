"""SQuAD-style short answers: answer normalisation, exact match, token F1 (the short_answer task's room)."""
