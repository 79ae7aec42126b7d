"""The competitions' rooms: one subpackage per competition (wattbot, financebench, squad).

A room's ``__init__.py`` holds only its tables (``FUNCTIONS``, ``PARAMS``, and ``DEFAULTS`` for the
default task's room); its code (metric, writer, groupings, error classes) is imported when a task
names one of its functions. The catalog (kohaku.tasks.named.catalog) finds the rooms by listing
this folder, so a new competition is a new subpackage here and nothing else: no generic module
names a room.
"""
