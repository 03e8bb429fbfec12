"""`python -m nmtkit` (used by `torchrun -m nmtkit train ...`)."""
from nmtkit.cli import main

if __name__ == "__main__":
    main()
