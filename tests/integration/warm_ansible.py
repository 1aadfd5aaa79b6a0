"""`ansible` and `ansible-playbook` runs started from a warm interpreter, for the integration tests.

`run(argv, **kwargs)` takes what `subprocess.run` takes at the tests' call sites and returns what it returns. An
ansible-core command of this interpreter's venv runs in a child forked from a process that has imported ansible-core
once (one such process per pytest worker and ansible environment): the child sets the run's environment, working
directory and output, then calls ansible-core's own command-line entry point (`ansible.cli.playbook.main`,
`ansible.cli.adhoc.main`) with the run's argv. What a run does is what a fresh `ansible-playbook` does; two costs go:
the interpreter's start and imports (about 0.4 CPU s a run) and the module payloads ansible-core builds once per
process (about 0.2 CPU s a module), which it caches in its local temporary directory: the children share it.

A run that does not fit falls back to `subprocess.run` itself: another program, another interpreter's ansible,
input on stdin, an output that is neither a pipe nor discarded, or a run already in flight on the same warm process
(from another thread). GPUNODE_COLD_ANSIBLE=1 sends every run there.
"""
import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BIN = os.path.dirname(sys.executable)
COMMANDS = {"ansible": "ansible.cli.adhoc", "ansible-playbook": "ansible.cli.playbook"}
# Read by the interpreter or by ansible-core while it imports (its configuration, the local temporary directory):
# a run whose values differ gets a warm process of its own.
_IMPORT_TIME = ("HOME", "TMPDIR", "LANG")
_IMPORT_TIME_PREFIXES = ("ANSIBLE_", "PYTHON", "LC_")
_MAX_WARM = 4

# The warm process. It imports what every run imports, then forks one child per request line (JSON: argv, env,
# cwd, stdout and stderr paths); it answers the child's pid, then its exit status. It ends when its input closes.
_SERVER = r'''
import atexit, json, os, sys, traceback
modules = json.loads(sys.argv[1])
for name in modules + ["ansible.executor.task_queue_manager", "ansible.executor.playbook_executor",
                       "ansible.executor.task_executor", "ansible.executor.process.worker",
                       "ansible.executor.module_common", "ansible.plugins.strategy.linear",
                       "ansible.plugins.connection.local", "ansible.plugins.action.normal"]:
    __import__(name)
from ansible.utils.path import cleanup_tmp_file
requests, answers = os.fdopen(int(sys.argv[2]), "r"), os.fdopen(int(sys.argv[3]), "w")


def child(request):
    requests.close()
    answers.close()
    # This process's local temporary directory (the payload cache) belongs to the warm process, which removes it.
    atexit.unregister(cleanup_tmp_file)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                            (2, request["stderr"], os.O_WRONLY)):
        if path is None:
            os.dup2(1, fd)
            continue
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = list(request["argv"])
    try:
        code = sys.modules[request["module"]].main(sys.argv)
    except SystemExit as ended:
        code = ended.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        sys.stderr.write("%s\n" % code)
        code = 1
    atexit._run_exitfuncs()
    return code


for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            code = child(request)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    answers.write("%d\n" % pid)
    answers.flush()
    status = os.waitpid(pid, 0)[1]
    answers.write("%d\n" % os.waitstatus_to_exitcode(status))
    answers.flush()
'''


class _Warm(object):
    """One warm process and the pipes to it; one run at a time."""

    def __init__(self, env):
        requests_read, self._requests = os.pipe()
        self._answers, answers_write = os.pipe()
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(sorted(COMMANDS.values())), str(requests_read),
             str(answers_write)],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(requests_read, answers_write),
            close_fds=True)
        os.close(requests_read)
        os.close(answers_write)
        self._buffer = b""

    def _answer(self, deadline):
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select([self._answers], [], [], wait)[0]
            if not ready:
                return None
            chunk = os.read(self._answers, 64)
            if not chunk:
                raise EOFError("the warm ansible process ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return int(line)

    def run(self, request, timeout):
        os.write(self._requests, (json.dumps(request) + "\n").encode())
        pid = self._answer(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        code = self._answer(deadline)
        if code is None:
            os.kill(pid, signal.SIGKILL)
            self._answer(None)
            return None
        return code

    def close(self):
        os.close(self._requests)
        os.close(self._answers)
        self.process.wait()


_warm = {}
_warm_lock = threading.Lock()


def _key(env):
    return tuple(sorted((name, value) for name, value in env.items()
                        if name in _IMPORT_TIME or name.startswith(_IMPORT_TIME_PREFIXES)))


def _warm_for(env):
    key = _key(env)
    with _warm_lock:
        warm = _warm.pop(key, None)
        if warm is None or warm.process.poll() is not None:
            warm = _Warm(env)
        _warm[key] = warm  # the most recently used last
        while len(_warm) > _MAX_WARM:
            _warm.pop(next(iter(_warm))).close()
    return warm


@atexit.register
def _close_all():
    with _warm_lock:
        while _warm:
            _warm.popitem()[1].close()


def _command(argv, env):
    program = argv[0] if os.path.dirname(argv[0]) else shutil.which(argv[0], path=env.get("PATH"))
    if not program or os.path.dirname(os.path.abspath(program)) != BIN:
        return None
    return COMMANDS.get(os.path.basename(program))


def run(argv, env=None, cwd=None, stdout=None, stderr=None, universal_newlines=None, text=None, timeout=None,
        check=False, **kwargs):
    """subprocess.run(argv, ...), an ansible-core command of this venv from a warm interpreter."""
    argv = [str(arg) for arg in argv]
    env = dict(os.environ if env is None else env)
    module = None if kwargs or os.environ.get("GPUNODE_COLD_ANSIBLE") else _command(argv, env)
    pipes = (subprocess.PIPE, subprocess.DEVNULL)
    if module is None or stdout not in pipes or stderr not in pipes + (subprocess.STDOUT,):
        return subprocess.run(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                              universal_newlines=universal_newlines, text=text, timeout=timeout, check=check,
                              **kwargs)
    warm = _warm_for(env)
    if not warm.lock.acquire(blocking=False):
        return subprocess.run(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                              universal_newlines=universal_newlines, text=text, timeout=timeout, check=check)
    scratch = tempfile.mkdtemp(prefix="gpunode-warm-ansible-")
    try:
        paths = {"stdout": os.path.join(scratch, "stdout"), "stderr": os.path.join(scratch, "stderr")}
        for path in paths.values():
            open(path, "wb").close()
        request = {"module": module, "argv": argv, "env": env, "cwd": os.path.abspath(cwd or os.getcwd()),
                   "stdout": paths["stdout"] if stdout == subprocess.PIPE else os.devnull,
                   "stderr": None if stderr == subprocess.STDOUT else
                   paths["stderr"] if stderr == subprocess.PIPE else os.devnull}
        try:
            code = warm.run(request, timeout)
        except (EOFError, OSError):
            warm.process.kill()
            raise
        output = {}
        for name, path in paths.items():
            with open(path, "rb") as handle:
                data = handle.read()
            if universal_newlines or text:  # as subprocess.run's text mode reads it
                data = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
            output[name] = data
    finally:
        warm.lock.release()
        shutil.rmtree(scratch, ignore_errors=True)
    captured_out = output["stdout"] if stdout == subprocess.PIPE else None
    captured_err = output["stderr"] if stderr == subprocess.PIPE else None
    if code is None:
        raise subprocess.TimeoutExpired(argv, timeout, output=captured_out, stderr=captured_err)
    proc = subprocess.CompletedProcess(argv, code, captured_out, captured_err)
    if check:
        proc.check_returncode()
    return proc
