"""Every "This is a bug" message sends the user to the README's section on reporting, and it exists."""
import os
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import HOW_TO_REPORT
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import BUG_REPORT
from unit_paths import REPO


def test_the_readme_has_the_section_the_messages_name():
    section = re.search(r'"([^"]+)"', HOW_TO_REPORT).group(1)
    with open(os.path.join(REPO, "README.md")) as handle:
        assert "\n## %s\n" % section in handle.read()


def test_every_bug_message_in_the_code_says_how_to_report():
    sources = []
    for top in ("plugins",):
        for directory, _dirs, files in os.walk(os.path.join(REPO, top)):
            sources += [os.path.join(directory, name) for name in files if name.endswith(".py")]
    for source in sources:
        with open(source) as handle:
            text = handle.read()
        for match in re.finditer(r"This is a bug[^\"]*\"", text):
            following = text[match.start():match.start() + 400]
            assert "HOW_TO_REPORT" in following, (source, match.group(0))
    assert HOW_TO_REPORT in BUG_REPORT
