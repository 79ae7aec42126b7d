"""What every layer stands on: errors, typed configs, CSV reading, the artifact cache, token counts."""
