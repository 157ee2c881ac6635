"""``python -m service`` runs the ``vmledger`` command line."""

from service.cli.app import main

main()
