"""plugins/module_utils stands on floors (plugins/module_utils/README.md): every import of another room
points down a floor, never up and never sideways, so node/ and editors/ cannot import each other."""
import ast
import os
import re

from unit_paths import REPO

MODULE_UTILS = os.path.join(REPO, "plugins", "module_utils")
PACKAGE = "ansible_collections.gpunode.nvidia.plugins.module_utils"
FLOOR_ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]+)\|")


def floors():
    """{room: floor} from the README's table."""
    found = {}
    with open(os.path.join(MODULE_UTILS, "README.md")) as handle:
        for line in handle:
            match = FLOOR_ROW.match(line)
            if match:
                for room in re.findall(r"`(\w+)/`", match.group(2)):
                    found[room] = int(match.group(1))
    return found


def rooms():
    return sorted(name for name in os.listdir(MODULE_UTILS)
                  if os.path.isfile(os.path.join(MODULE_UTILS, name, "__init__.py")))


def imported_rooms(path):
    """(line, room) of every import of a module_utils room in the file, however it is written."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError("%s:%d: a relative import; module_utils imports by the full name" % (path, node.lineno))
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name == PACKAGE and isinstance(node, ast.ImportFrom):  # from ...module_utils import ROOM
                for alias in node.names:
                    yield node.lineno, alias.name
            elif name.startswith(PACKAGE + "."):
                yield node.lineno, name[len(PACKAGE) + 1:].split(".")[0]


def arrows():
    """[(file, line, from room, to room)] of the imports between rooms."""
    found = []
    for room in rooms():
        for directory, _dirs, files in os.walk(os.path.join(MODULE_UTILS, room)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    found.extend((os.path.relpath(path, MODULE_UTILS), line, room, target)
                                 for line, target in imported_rooms(path) if target != room)
    return found


def test_every_room_has_a_floor_in_the_readme():
    assert sorted(floors()) == rooms()


def test_every_import_between_rooms_points_down_a_floor():
    floor = floors()
    wrong = ["%s:%d: %s/ (floor %d) imports %s/ (floor %d)" % (path, line, source, floor[source], target, floor[target])
             for path, line, source, target in arrows() if floor[target] >= floor[source]]
    assert not wrong, "imports that run up or sideways (see plugins/module_utils/README.md):\n" + "\n".join(wrong)


def test_node_and_editors_do_not_import_each_other():
    assert not [arrow for arrow in arrows() if {arrow[2], arrow[3]} == {"node", "editors"}]


def test_the_check_sees_an_arrow_that_runs_up(tmp_path):
    source = tmp_path / "reader.py"
    source.write_text("from %s.editors import masking\nimport %s.doctor.rules\nfrom %s import install\n"
                      % (PACKAGE, PACKAGE, PACKAGE))
    assert list(imported_rooms(str(source))) == [(1, "editors"), (2, "doctor"), (3, "install")]
    assert floors()["editors"] > floors()["node"] > floors()["cri"] > floors()["common"] == 0
