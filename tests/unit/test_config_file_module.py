"""gpunode.nvidia.config_file (node side): no traceback ever reaches the user."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpunode.nvidia.plugins.modules import config_file


def run(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            config_file.main()
    return json.loads(capsys.readouterr().out)


def test_unexpected_exception_is_a_failure_naming_the_file(capsys, tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text('password = "s3cr3t"\n')

    def broken(_path):
        raise ValueError('password = "s3cr3t"')
    monkeypatch.setattr(config_file, "read_bytes", broken)
    result = run(capsys, path=str(path), op="read")
    assert result["failed"]
    assert result["msg"].startswith("%s: unexpected ValueError" % path)
    assert "bug" in result["msg"] and "s3cr3t" not in result["msg"]
    assert path.read_text() == 'password = "s3cr3t"\n'
