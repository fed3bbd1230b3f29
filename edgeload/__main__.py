"""``python -m edgeload`` runs the command line."""

from .cli.main import main

raise SystemExit(main())
