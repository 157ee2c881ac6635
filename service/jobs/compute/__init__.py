"""Compute drivers: what the job worker asks of compute nodes."""
