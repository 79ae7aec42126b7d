"""The named functions a task YAML refers to by a short name (``score.metrics[].fn: token_f1``).

:mod:`.catalog` is the table (kind -> name -> ``module:function``, and the params each declares):
the generic functions' and every room's ``FUNCTIONS``, found by listing kohaku/tasks/rooms/.
:mod:`.registry` looks a name up and imports its module only then (and hashes the scoring code
for the cache key); :mod:`.builtin` holds the generic functions of no one competition (name
grouping, the columns and json writers, llm_judge, page_prf, page_pools, na_f1, generic classes).
"""
