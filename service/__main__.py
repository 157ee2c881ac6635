"""``python -m service`` runs the ``vmledger`` command line."""

from service.cli import main

main()
