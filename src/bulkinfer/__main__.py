"""`python -m bulkinfer ...` is the `bulkinfer` command."""

from bulkinfer.cli import main

main()
