"""Write a stand-in for ansible-test's get-pip bootstrap script that installs PyPI's pip wheel.

ansible-test runs ``python get_pip_<version>.py --disable-pip-version-check pip==<version>
[--no-setuptools] [--no-wheel]`` inside an empty virtual environment (ansible-test 2.16 asks for
``setuptools==<version> wheel==<version>`` too). The real script embeds pip and downloads the rest
from PyPI; this one does the same with the wheel given on the command line.
"""
import base64
import sys

TEMPLATE = '''#!/usr/bin/env python3
"""get-pip stand-in written by tests/sanity/write_get_pip.py (gpunode.nvidia sanity): installs
pip from the embedded PyPI wheel {wheel_name}, and what else it is asked for from the index."""
import base64
import os
import sys
import tempfile

WHEEL = {wheel!r}
GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")


def main():
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
    with tempfile.TemporaryDirectory() as tmp:
        wheel_path = os.path.join(tmp, {wheel_name!r})
        with open(wheel_path, "wb") as handle:
            handle.write(base64.b64decode(WHEEL))
        sys.path.insert(0, wheel_path)
        from pip._internal.cli.main import main as pip_main
        return pip_main(["install", "--upgrade", "--force-reinstall", "--find-links", tmp] + args)


if __name__ == "__main__":
    sys.exit(main())
'''


def main(wheel_path, script_path):
    with open(wheel_path, "rb") as handle:
        wheel = base64.b64encode(handle.read()).decode("ascii")
    with open(script_path, "w") as handle:
        handle.write(TEMPLATE.format(wheel=wheel, wheel_name=wheel_path.rsplit("/", 1)[-1]))


if __name__ == "__main__":
    main(*sys.argv[1:])
