"""Where the unit tests find the repository, their corpus and their shared node trees.

The tests live in folders that mirror plugins/; tests/unit/conftest.py puts this folder on sys.path, so a test
anywhere below it imports these names (and node_trees, gpu_health_trees) the same way."""
import os

UNIT_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(UNIT_DIR))
