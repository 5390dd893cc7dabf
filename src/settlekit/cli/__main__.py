"""`python -m settlekit.cli`."""

from settlekit.cli import main

main()
