"""The `vram` console script (and `python -m vram`): the command line itself, in-process."""

import sys

from . import _vram


def main() -> None:
    """Run `vram` on sys.argv and exit with its exit code."""
    sys.exit(_vram.main(["vram", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
