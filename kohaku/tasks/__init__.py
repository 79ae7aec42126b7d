"""Pluggable competition tasks: specs, scoring and metric functions."""
