"""How the local run and the tuning sweep report progress: one line at a time to a callable
(``print`` on the command line, a list's ``append`` in a test)."""

from collections.abc import Callable

Log = Callable[[str], None]
