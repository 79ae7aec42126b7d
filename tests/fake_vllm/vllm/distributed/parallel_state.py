"""Fake vllm.distributed.parallel_state."""

CLEANUPS = []


def cleanup_dist_env_and_memory(shutdown_ray: bool = False) -> None:
    CLEANUPS.append(shutdown_ray)
