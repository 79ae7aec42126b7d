"""A task's files, read and written: questions and solutions (:mod:`.io`: CSV, JSON lines or a JSON
array, as all-string tables), a competition's own JSON as it comes (:mod:`.shapes`: records nested
in a document, objects keyed by question id), submissions in whatever format the task's writer
wrote them (:mod:`.submissions`) and the ``json`` writer's document (:mod:`.documents`).

They live together because every reader goes through the same byte boundary
(kohaku.core.readfile) and turns a file into the typed tables the rest of the task machinery
reads; nothing here scores.
"""
