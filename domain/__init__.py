"""The pure domain of vmledger: aggregates, events, the transition and command-rule tables.

Imports only the standard library and ``eventsourcing.domain``.
"""
