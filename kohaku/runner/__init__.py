"""The runner layer: stages in order with the cache (pipeline), the Stage declaration, services, Hydra callbacks, sweeps."""
