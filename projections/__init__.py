"""Read models: projections of the event log into plain SQL tables, and their runner.

Imports ``domain``, never ``service``.
"""
