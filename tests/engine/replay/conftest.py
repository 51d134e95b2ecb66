import os
import shutil
import subprocess

import pytest


@pytest.fixture
def read_only():
    """``read_only(path)`` makes a file or folder read-only, for root too (who ignores
    modes: ``chattr +i``); undone after the test. Skips where neither way is open."""
    undo = []

    def make(path):
        if os.geteuid() != 0:
            mode = os.stat(path).st_mode
            os.chmod(path, 0o500 if os.path.isdir(path) else 0o400)
            undo.append(lambda: os.chmod(path, mode))
            return
        if shutil.which("chattr") is None:
            pytest.skip("root ignores modes and chattr is missing: nothing is read-only")
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            pytest.skip("this file system has no immutable files (chattr +i failed)")
        undo.append(lambda: subprocess.run(["chattr", "-i", str(path)], check=True))

    yield make
    for fn in reversed(undo):
        fn()
