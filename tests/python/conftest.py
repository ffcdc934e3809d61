# SPDX-License-Identifier: Apache-2.0
import os
import sys

# The helpers (worlds, reference, dist_cases) and the examples' model are imported by name, here and
# in the spawned processes (which inherit sys.path).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
