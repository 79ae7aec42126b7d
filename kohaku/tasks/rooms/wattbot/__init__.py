"""WattBot 2025: its metric, submission format and error classes (the task's room).

:data:`FUNCTIONS` is the room's table of named functions (kind -> name -> ``module:function``),
read by :mod:`kohaku.tasks.named.catalog`; :data:`DEFAULTS` says this room's task is kohaku's default
task (``conf/config.yaml``'s ``task``): the names :mod:`kohaku.tasks.spec`'s defaults take.
"""

_F = "kohaku.tasks.rooms.wattbot.functions"

FUNCTIONS: dict[str, dict[str, str]] = {
    "group": {"wattbot": f"{_F}:wattbot_grouping"},
    "writer": {"wattbot": f"{_F}:wattbot_writer"},
    "table": {"wattbot": f"{_F}:wattbot_table"},
    "metric": {"doc_jaccard": f"{_F}:doc_jaccard_metric"},
    "classes": {"wattbot": f"{_F}:wattbot_classes"},
    "scorer": {"wattbot": f"{_F}:wattbot_scorer"},
    "columns": {"wattbot": f"{_F}:wattbot_columns"},
    "layout": {"wattbot": f"{_F}:wattbot_layout"},
    "rows": {"wattbot": f"{_F}:wattbot_rows"},
    "frames": {"wattbot": f"{_F}:wattbot_frames", "wattbot-recall": f"{_F}:wattbot_frames"},
    "variant": {"wattbot": f"{_F}:wattbot_metric", "wattbot-recall": f"{_F}:wattbot_metric"},
}

#: the params each of the room's functions accepts (kohaku.tasks.named.catalog; none when not listed)
PARAMS: dict[str, dict[str, tuple[str, ...]]] = {"metric": {"doc_jaccard": ("pred", "gold")}}

#: the default task's names: the task's name and the function of each kind a task (or a
#: scores.json) that names none takes (kohaku.tasks.spec's dataclass defaults, the score
#: stage's default variant); for the commands that benchmark or check the default task
#: (kohaku.tools.defaults): its corpus config (conf/corpus/), its experiment (conf/experiment/)
#: and the module of its competition metric
DEFAULTS: dict[str, str] = {"name": "wattbot", "group": "wattbot", "writer": "wattbot",
                            "scorer": "wattbot", "classes": "wattbot", "variant": "wattbot",
                            "corpus": "wattbot", "experiment": "kohaku_wattbot",
                            "metric_module": "kohaku.tasks.rooms.wattbot.metric"}
