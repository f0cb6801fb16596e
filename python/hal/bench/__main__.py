"""python -m hal.bench BENCHMARK: see hal/bench/__init__.py."""
import sys

from . import main

sys.exit(main())
