#!/usr/bin/env python3
"""moestream vs llama.cpp, cell by cell, resumable: see tools/benchmatrix/ and `tools/matrix.py --help`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchmatrix.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
