"""``python -m ember.fuzz --minutes N --seed S``: the differential fuzzer (see ``docs/fuzzing.md``).

The engine is ``ember._src.fuzz``; this module is its command line.
"""

import sys

from ember._src.fuzz import main

if __name__ == "__main__":
    sys.exit(main())
