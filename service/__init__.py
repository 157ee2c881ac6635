"""The vmledger application: command handlers, job worker, compute drivers, HTTP API, CLI."""
