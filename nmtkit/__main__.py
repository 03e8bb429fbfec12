"""`python -m nmtkit` (used by `torchrun -m nmtkit train ...`) and the `nmtkit` program."""
import sys


def run() -> None:
    """`nmtkit.cli.main`, imported within: a Ctrl-C while it loads ends the command, not with a traceback."""
    try:
        from nmtkit.cli import main

        main()
    except KeyboardInterrupt:
        if sys.stderr is not None:  # started with stderr closed (2>&-)
            sys.stderr.write("nmtkit: aborted\n")
        sys.exit(130)


if __name__ == "__main__":
    run()
