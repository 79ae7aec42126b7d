"""kohaku's Hydra plugins (Hydra instantiates sweepers and launchers only from ``hydra_plugins``).

- ``sweeper.KeyOrderedSweeper``: ``hydra/sweeper=kohaku`` (the default), see ``kohaku/runner/sweep.py``.
- ``ray_launcher.RayLauncher``: ``hydra/launcher=ray|ray_gpu|ray_cluster``.

Hydra imports every module here at start-up to find plugins, so they import little at the top.
"""
