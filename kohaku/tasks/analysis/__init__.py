"""Why a run loses: error classes, every question in exactly one.

:mod:`.classes` holds the generic classes of any task, :mod:`.typed_classes` the classes of a task
with answer kinds and cited pages (by kind, not-answerable both ways, a page dimension), and
:mod:`.slips` the helpers every classes function uses (an answer's kind, a slip of scale, the
class columns and counts). A competition's own classes live in its room (kohaku/tasks/rooms/).
"""
