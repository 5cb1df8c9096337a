"""``python -m labkit`` is the ``labkit`` command."""

from labkit.cli import main

raise SystemExit(main())
