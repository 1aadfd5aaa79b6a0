"""Make the repository importable as the collection `gpunode.nvidia`.

Tests import code exactly as Ansible does (`ansible_collections.gpunode.nvidia...`),
through a symlink tree under .cache/collections that `make` also uses as
ANSIBLE_COLLECTIONS_PATH.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, ".cache", "collections")
_link = os.path.join(COLLECTIONS, "ansible_collections", "gpunode", "nvidia")
if not os.path.islink(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(REPO, _link)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
