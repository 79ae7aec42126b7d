"""Scoring a submission with its task's metric.

- :mod:`.scoring`: the task's scorer (``score.scorer``), the ``components`` scorer,
  ``score_submission``; :mod:`.components`: what a score is made of (scores.json's metric).
- The metrics' rules any task uses: :mod:`.kind_metrics` (``kind_value``), :mod:`.refs` (cited
  documents and pages), :mod:`.amounts` (amounts as filings write them), :mod:`.text_match`
  (SQuAD v1.1's exact match and token F1), :mod:`.judge` (the LLM judge).
- A competition's own scorer: :mod:`.adopted` runs it unedited as the ``adopted`` metric;
  :mod:`.check` compares kohaku's metric with it (``scripts/check_scorer.py``).
- :mod:`.calibration`: does a metric accept what people's labels accept
  (``scripts/calibrate_metric.py``).

The rooms (kohaku/tasks/rooms/) build their metrics from these; a named metric is reached
through the catalog (kohaku.tasks.named), never imported by name here.
"""
