"""The commands' library: what scripts/ run (retrieval evaluation, the GPU check, corpus fetchers,
fixtures, benchmarks, mutation testing), importable and testable. The top layer: it may use the
whole library and, like scripts, the runner's config helpers (compose_config, option_values)."""
